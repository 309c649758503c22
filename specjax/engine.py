"""The compiled generation program: prefill, then verification rounds in one `lax.while_loop`.

Autoregressive decoding is the same round with K = 0 (no drafter): the target scores one position
and the rejection sampler reduces to sampling from p.
"""

import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from specjax.cache import KVCache, init_cache
from specjax.rejection import accept
from specjax.sampling import SamplingParams, distribution, sample


@flax.struct.dataclass
class DecodeState:
  """Everything one round reads and writes; rows advance independently."""

  tokens_BxS: jax.Array        # prompt + generated tokens per row
  seq_len_B: jax.Array         # tokens in each row's sequence; the last one is not yet in the target cache
  n_new_B: jax.Array           # generated tokens per row
  done_B: jax.Array
  cache: KVCache               # target cache, valid for positions < seq_len_B - 1
  draft_state: Any
  row_keys_B: jax.Array
  round: jax.Array
  accepted_RxB: jax.Array      # drafts accepted per round and row; -1 where the row was already done
  emitted_RxB: jax.Array       # tokens emitted per round and row (accepted + correction/bonus, cut at stops)


@flax.struct.dataclass
class RoundOutput:
  """What a round produces before it is committed (the phase-split benchmark times these separately)."""

  n_accepted_B: jax.Array
  next_token_B: jax.Array
  draft_BxK: jax.Array




def row_keys(seed_key: jax.Array, batch: int) -> jax.Array:
  """One independent key per row: a batch of N copies of a prompt gives N independent samples."""
  return jax.vmap(lambda i: jax.random.fold_in(seed_key, i))(jnp.arange(batch))


def prefill(target, drafter, drafter_params, tokens_BxS, prompt_len_B, max_new_B, row_keys_B, *, sampling,
            prompt_bucket: int, eos_ids: tuple, max_rounds: int, mesh=None) -> DecodeState:
  """Runs the prompt through target (and drafter) and samples each row's first new token."""
  batch, size = tokens_BxS.shape
  rows_B = jnp.arange(batch)
  cache = init_cache(target.config, batch, size)
  if mesh is not None:
    from specjax.sharding import cache_sharding
    cache = jax.lax.with_sharding_constraint(cache, cache_sharding(mesh, target.config, batch))
  positions = jnp.broadcast_to(jnp.arange(prompt_bucket, dtype=jnp.int32), (batch, prompt_bucket))
  hidden, cache, _ = target.hidden_states(tokens_BxS[:, :prompt_bucket], positions, cache)
  logits_BxV = target.logits(hidden[rows_B, prompt_len_B - 1])
  keys_B = jax.vmap(lambda key: jax.random.fold_in(key, 0))(row_keys_B)
  first_B = jax.vmap(sample)(keys_B, distribution(logits_BxV, sampling))
  tokens_BxS = tokens_BxS.at[rows_B, prompt_len_B].set(first_B)
  draft_state = drafter.init(drafter_params, tokens_BxS, prompt_len_B, prompt_bucket) if drafter else ()
  return DecodeState(
      tokens_BxS=tokens_BxS,
      seq_len_B=prompt_len_B + 1,
      n_new_B=jnp.ones((batch,), jnp.int32),
      done_B=(max_new_B <= 1) | _is_eos(first_B, eos_ids),
      cache=cache.with_lengths(prompt_len_B),
      draft_state=draft_state,
      row_keys_B=row_keys_B,
      round=jnp.int32(0),
      accepted_RxB=jnp.full((max_rounds, batch), -1, jnp.int32),
      emitted_RxB=jnp.zeros((max_rounds, batch), jnp.int32),
  )


def _is_eos(tokens, eos_ids: tuple):
  if not eos_ids:
    return jnp.zeros(tokens.shape, bool)
  return jnp.isin(tokens, jnp.asarray(eos_ids, jnp.int32))


def round_keys(state: DecodeState) -> tuple[jax.Array, jax.Array]:
  keys_B = jax.vmap(lambda key: jax.random.fold_in(key, state.round + 1))(state.row_keys_B)
  split_Bx2 = jax.vmap(lambda key: jax.random.split(key, 2))(keys_B)
  return split_Bx2[:, 0], split_Bx2[:, 1]


def draft(drafter, drafter_params, state: DecodeState, *, k: int, sampling, vocab_size: int):
  """K proposals per row and their q (one-hot for deterministic drafters); empty when k == 0."""
  batch = state.tokens_BxS.shape[0]
  if k == 0:
    return jnp.zeros((batch, 0), jnp.int32), jnp.zeros((batch, 0, vocab_size), jnp.float32), state.draft_state
  draft_keys, _ = round_keys(state)
  draft_BxK, q_BxKxV, draft_state = drafter.propose(drafter_params, state.draft_state, state.tokens_BxS,
                                                    state.seq_len_B, k, sampling, draft_keys)
  if q_BxKxV is None:
    q_BxKxV = jax.nn.one_hot(draft_BxK, vocab_size, dtype=jnp.float32)
  return draft_BxK.astype(jnp.int32), q_BxKxV, draft_state


def verify(target, state: DecodeState, draft_BxK: jax.Array):
  """ONE target call over the K+1 positions [last token, d_1..d_K] at each row's own offsets."""
  batch, k = draft_BxK.shape
  rows_B = jnp.arange(batch)
  last_B = state.tokens_BxS[rows_B, state.seq_len_B - 1]
  inputs_BxK1 = jnp.concatenate([last_B[:, None], draft_BxK], axis=1)
  positions_BxK1 = state.seq_len_B[:, None] - 1 + jnp.arange(k + 1, dtype=jnp.int32)[None, :]
  logits_BxK1xV, _, cache = target(inputs_BxK1, positions_BxK1, state.cache)
  return logits_BxK1xV, cache


def accept_and_commit(drafter, drafter_params, state: DecodeState, logits_BxK1xV, q_BxKxV, draft_BxK, cache,
                      draft_state, max_new_B, *, sampling, eos_ids: tuple) -> DecodeState:
  """Rejection sampling, then per-row commit: tokens, lengths (the cache rollback), stops and stats."""
  batch, k = draft_BxK.shape
  rows_B = jnp.arange(batch)
  _, accept_keys = round_keys(state)
  p_BxK1xV = distribution(logits_BxK1xV, sampling)
  n_accepted_B, next_B = accept(p_BxK1xV, q_BxKxV, draft_BxK, accept_keys)

  index_1xK1 = jnp.arange(k + 1, dtype=jnp.int32)[None, :]
  padded_BxK1 = jnp.concatenate([draft_BxK, jnp.zeros((batch, 1), jnp.int32)], axis=1)
  emitted_BxK1 = jnp.where(index_1xK1 < n_accepted_B[:, None], padded_BxK1, next_B[:, None])
  count_B = jnp.minimum(n_accepted_B + 1, max_new_B - state.n_new_B)
  eos_BxK1 = _is_eos(emitted_BxK1, eos_ids) & (index_1xK1 < count_B[:, None])
  hit_eos_B = eos_BxK1.any(axis=1)
  count_B = jnp.where(hit_eos_B, jnp.argmax(eos_BxK1, axis=1) + 1, count_B)
  count_B = jnp.where(state.done_B, 0, count_B)

  size = state.tokens_BxS.shape[1]
  write_at = jnp.where(index_1xK1 < count_B[:, None], state.seq_len_B[:, None] + index_1xK1, size)
  tokens_BxS = state.tokens_BxS.at[rows_B[:, None], write_at].set(emitted_BxK1, mode="drop")
  seq_len_B = state.seq_len_B + count_B
  n_new_B = state.n_new_B + count_B
  done_B = state.done_B | (n_new_B >= max_new_B) | hit_eos_B
  if drafter is not None:
    draft_state = drafter.commit(drafter_params, draft_state, n_accepted_B, seq_len_B)
  active_B = ~state.done_B
  return state.replace(
      tokens_BxS=tokens_BxS,
      seq_len_B=seq_len_B,
      n_new_B=n_new_B,
      done_B=done_B,
      cache=cache.with_lengths(seq_len_B - 1),
      draft_state=draft_state,
      round=state.round + 1,
      accepted_RxB=state.accepted_RxB.at[state.round].set(jnp.where(active_B, n_accepted_B, -1)),
      emitted_RxB=state.emitted_RxB.at[state.round].set(count_B),
  )


def speculative_round(target, drafter, drafter_params, state: DecodeState, max_new_B, *, k: int, sampling,
                      eos_ids: tuple) -> DecodeState:
  draft_BxK, q_BxKxV, draft_state = draft(drafter, drafter_params, state, k=k, sampling=sampling,
                                          vocab_size=target.config.vocab_size)
  logits_BxK1xV, cache = verify(target, state, draft_BxK)
  return accept_and_commit(drafter, drafter_params, state, logits_BxK1xV, q_BxKxV, draft_BxK, cache, draft_state,
                           max_new_B, sampling=sampling, eos_ids=eos_ids)


@functools.partial(jax.jit, static_argnames=("graphdef", "drafter", "sampling", "k", "eos_ids", "prompt_bucket", "mesh"),
                   donate_argnames=("tokens_BxS",))
def generate_program(target_params, drafter_params, tokens_BxS, prompt_len_B, max_new_B, seed_key, *, graphdef,
                     drafter, sampling: SamplingParams, k: int, eos_ids: tuple, prompt_bucket: int,
                     mesh=None) -> DecodeState:
  """The whole generation as one program: prefill, then rounds until every row is done."""
  target = nnx.merge(graphdef, target_params)
  max_rounds = tokens_BxS.shape[1]
  state = prefill(target, drafter, drafter_params, tokens_BxS, prompt_len_B, max_new_B,
                  row_keys(seed_key, tokens_BxS.shape[0]), sampling=sampling, prompt_bucket=prompt_bucket,
                  eos_ids=eos_ids, max_rounds=max_rounds, mesh=mesh)

  def not_finished(state):
    return jnp.any(~state.done_B) & (state.round < max_rounds)

  def body(state):
    return speculative_round(target, drafter, drafter_params, state, max_new_B, k=k, sampling=sampling,
                             eos_ids=eos_ids)

  return jax.lax.while_loop(not_finished, body, state)
