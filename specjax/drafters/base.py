"""The drafter protocol: static (hashable) objects whose arrays travel through jit as `params`."""

from typing import Any

import jax


class Drafter:
  """Proposes K tokens per row and the distributions q they were drawn from.

  Instances are jit-static: equality and hash must depend on static fields only. Arrays live in
  `params()` and pass through jit as arguments; per-generation state is a pytree built by `init`.
  """

  #: vocabulary the drafter proposes over (None: whatever the target uses).
  vocab_size: int | None = None
  #: longest sequence the drafter can attend over (None: unbounded).
  max_seq_len: int | None = None
  #: largest K the drafter supports.
  max_k: int = 64

  def params(self) -> Any:
    return ()

  def init(self, params, tokens_BxS: jax.Array, prompt_len_B: jax.Array, prompt_bucket: int) -> Any:
    """State after the prompt (e.g. a prefilled draft cache)."""
    return ()

  def propose(self, params, state, tokens_BxS: jax.Array, seq_len_B: jax.Array, k: int, sampling,
              keys_B: jax.Array) -> tuple[jax.Array, jax.Array | None, Any]:
    """(draft_BxK, q_BxKxV or None for deterministic one-hot proposals, new state).

    tokens_BxS[b, :seq_len_B[b]] is row b's sequence; its last token is not yet verified by the target.
    """
    raise NotImplementedError

  def commit(self, params, state, n_accepted_B: jax.Array, seq_len_B: jax.Array) -> Any:
    """State after the target accepted n_accepted_B drafts and seq_len_B is the new sequence length."""
    return state
