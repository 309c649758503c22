"""What one generation carries from round to round, and the rules that read it (keys, stops, finished rows)."""

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp


@flax.struct.dataclass
class DecodeState:
  """Everything one round reads and writes; rows advance independently."""

  tokens_BxS: jax.Array        # prompt + generated tokens per row
  seq_len_B: jax.Array         # tokens in each row's sequence; the last one is not yet in the target cache
  n_new_B: jax.Array           # generated tokens per row
  done_B: jax.Array
  cache: Any                   # target KVCache, valid for positions < seq_len_B - 1
  draft_state: Any
  row_keys_B: jax.Array
  round: jax.Array
  accepted_RxB: jax.Array      # drafts accepted per round and row; -1 where the row was already done
  emitted_RxB: jax.Array       # tokens emitted per round and row (accepted + correction/bonus, cut at stops)
  k_R: jax.Array               # drafts proposed in each round (fixed K, or the adaptive policy's choice)
  prompt_features: Any = ()    # TargetFeatures of the prompt for feature-level drafters; consumed by their init
  policy: Any = ()             # PolicyState when K is chosen per round
  tree_rank_RxBxD1: Any = ()   # token trees: per round, row and visited context, the accepted child's rank (-1: none)
  tree_children_RxBxD1: Any = ()  # ... and the context's children (0: not reached); `trees.ranks.path_ranks`


def empty_round_log(rounds: int, batch: int) -> dict:
  """The round log of a state that has run no round yet: `round`, `accepted_RxB`, `emitted_RxB` and `k_R`."""
  return {"round": jnp.int32(0), "accepted_RxB": jnp.full((rounds, batch), -1, jnp.int32),
          "emitted_RxB": jnp.zeros((rounds, batch), jnp.int32), "k_R": jnp.zeros((rounds,), jnp.int32)}


def row_keys(seed_key: jax.Array, batch: int) -> jax.Array:
  """One independent key per row: a batch of N copies of a prompt gives N independent samples."""
  return jax.vmap(lambda i: jax.random.fold_in(seed_key, i))(jnp.arange(batch))


def round_keys(state: DecodeState) -> tuple[jax.Array, jax.Array]:
  """(draft keys, acceptance keys) of this round, per row."""
  keys_B = jax.vmap(lambda key: jax.random.fold_in(key, state.round + 1))(state.row_keys_B)
  split_Bx2 = jax.vmap(lambda key: jax.random.split(key, 2))(keys_B)
  return split_Bx2[:, 0], split_Bx2[:, 1]


def is_eos(tokens, eos_ids: tuple):
  if not eos_ids:
    return jnp.zeros(tokens.shape, bool)
  return jnp.isin(tokens, jnp.asarray(eos_ids, jnp.int32))


def budget_spent(n_new_B, max_new_B):
  """The one stopping rule besides EOS: a row is done once it generated its budget of new tokens."""
  return n_new_B >= max_new_B


def with_budget(state: DecodeState, max_new_B) -> DecodeState:
  """The state with rows whose budget is already spent marked done (a prefilled state reused for a new budget)."""
  return state.replace(done_B=state.done_B | budget_spent(state.n_new_B, max_new_B))


def unfinished(state: DecodeState) -> jax.Array:
  """Some row still generates and the round log has room."""
  return jnp.any(~state.done_B) & (state.round < state.accepted_RxB.shape[0])
