"""The drafter protocol: static (hashable) objects whose arrays travel through jit as `params`."""

from typing import Any, Callable

import flax.struct
import jax
from flax import nnx


@flax.struct.dataclass
class TargetFeatures:
  """What the target computed at some positions, for drafters that read it (no extra target pass).

  hidden_BxTxD: final-normed hidden states (what the output head reads).
  layers_BxTxLxD: residual stream after each of the drafter's `feature_layers`, in that order.
  """

  hidden_BxTxD: jax.Array
  layers_BxTxLxD: jax.Array


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
  #: target layers whose residual stream the drafter reads; None: the drafter reads no target features and the
  #: engine passes features=None to `init` and `commit`.
  feature_layers: tuple[int, ...] | None = None
  #: True: the drafter keeps no cache of its own but drafts in the target's KV cache (a draft of the target's own
  #: cache layout): `propose` / `propose_tree` / `observe` receive and return the target's cache as their state and
  #: write only at positions the verification that follows writes again (from seq_len_B - 1 on), so the target's
  #: committed keys and values are never changed, and the draft reads them for the prompt and every committed token
  #: (no prefill, copy or catch-up of its own, half the KV memory).
  shares_target_cache: bool = False
  #: True: `propose_tree` drafts token trees (`specjax.trees.StaticTree`, `DynamicTree`).
  branches: bool = False
  #: deepest tree the drafter can draft (None: any).
  max_tree_depth: int | None = None
  #: True: autoregressive rounds may run without the drafter (no `observe`), and `catch_up` later takes in the
  #: committed tokens it missed (a draft model's cache); False: it must observe every autoregressive round.
  catches_up: bool = False

  def params(self) -> Any:
    return ()

  def init(self, params, tokens_BxS: jax.Array, prompt_len_B: jax.Array, prompt_bucket: int,
           features: TargetFeatures | None = None) -> Any:
    """State after the prompt (e.g. a prefilled draft cache); features cover prompt positions [0, prompt_bucket)."""
    return ()

  def propose(self, params, state, tokens_BxS: jax.Array, seq_len_B: jax.Array, k: int, sampling,
              keys_B: jax.Array) -> tuple[jax.Array, jax.Array | None, Any]:
    """(draft_BxK, q_BxKxV or None for deterministic one-hot proposals, new state).

    tokens_BxS[b, :seq_len_B[b]] is row b's sequence; its last token is not yet verified by the target.
    """
    raise NotImplementedError

  def propose_tree(self, params, state, tokens_BxS: jax.Array, seq_len_B: jax.Array, tree, sampling,
                   keys_B: jax.Array, vocab_size: int) -> tuple[jax.Array, jax.Array, jax.Array, Any]:
    """(tokens_BxN, parent_BxN, q_BxN1xV, new state) for a `specjax.trees.StaticTree` or `DynamicTree` of N nodes:
    each node's token and parent (-1: the root; parents before children, siblings in the order they were drawn),
    drawn the tree's way (`tree.branching`) from the distribution of its parent's context, and q at every context
    (the root's first, then each node's: what the children of that context were drawn from; vocab_size, the
    target's, is q's last axis). Drafters that score contexts build it with `specjax.trees.grow.grow`."""
    raise NotImplementedError(f"{type(self).__name__} does not draft trees")

  def commit_tree(self, params, state, path_BxN: jax.Array, n_accepted_B: jax.Array, root_slot_B: jax.Array,
                  accepted_BxD: jax.Array) -> Any:
    """State after the target accepted the first n_accepted_B nodes of path_BxN (node indices, root first; their
    tokens accepted_BxD) of a tree whose root sat at root_slot_B: a drafter that wrote the tree into a cache moves
    the accepted entries to consecutive positions. `commit` follows, as after a chain, with the target's features
    of the root and the path."""
    return state

  def worth_verifying(self, params, state, tokens_BxS: jax.Array, seq_len_B: jax.Array) -> jax.Array | None:
    """bool_B: rows whose next proposal the drafter itself expects to be worth a verification, or None (no
    opinion). The adaptive policy runs an autoregressive step, instead of a speculative round, when no
    active row is worth it (e.g. prompt lookup without a long enough match)."""
    return None

  def observe(self, params, state, tokens_BxS: jax.Array, seq_len_B: jax.Array) -> Any:
    """State after a round that drafted nothing (the adaptive policy's autoregressive step): the target is about
    to verify the token at seq_len_B - 1; drafters that keep a cache take in what precedes it."""
    return state

  def catch_up(self, params, state, tokens_BxS: jax.Array, positions_BxC: jax.Array) -> Any:
    """State after taking in the tokens at positions_BxC (C consecutive positions per row) that autoregressive
    rounds run without the drafter skipped (`catches_up` drafters only). Positions before seq_len_B - 2 hold
    committed tokens; a short row's chunk may reach past them, and entries there are rewritten before any draft
    reads them."""
    raise NotImplementedError(f"{type(self).__name__} cannot catch up; it observes every autoregressive round")

  def commit(self, params, state, n_accepted_B: jax.Array, seq_len_B: jax.Array,
             features: TargetFeatures | None = None) -> Any:
    """State after the target accepted n_accepted_B drafts and seq_len_B is the new sequence length; features
    cover the K+1 verified positions [last token, d_1..d_K] (only the first n_accepted_B + 1 are now committed)."""
    return state

  def saved(self) -> tuple[dict, Any]:
    """(JSON-able static fields, the trained arrays) that `specjax.training.export` stores for a drafter that
    learns; `from_saved` is the inverse. Drafters with nothing trained of their own raise."""
    raise TypeError(f"cannot export {self!r}: not a trained head (a DraftModel is saved with save_model)")

  @classmethod
  def from_saved(cls, target, description: dict, restore: Callable[[Any], Any]) -> "Drafter":
    """The drafter `saved` described, attached to `target`; `restore(template)` reads the stored arrays into the
    template's tree (its shapes and dtypes)."""
    raise TypeError(f"{cls.__name__} has nothing trained to load")


def with_pure_dict(state: nnx.State, pure: dict) -> nnx.State:
  """A copy of `state` holding the arrays of `pure` (laid out as `state.to_pure_dict()`)."""
  state = jax.tree.map(lambda x: x, state)
  nnx.replace_by_pure_dict(state, pure)
  return state
