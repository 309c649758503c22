"""The compiled generation: a prefill program (prompt -> first token), then a decode program that runs the
drafter's prefill and every verification round in one `lax.while_loop`.

Autoregressive decoding is the same round with K = 0 (no drafter): the target scores one position
and the rejection sampler reduces to sampling from p. Prefill is its own program because it depends only on
(batch, prompt bucket, sampling): every method and K at that shape shares one compilation, and its time is
the time to first token.
"""

import functools
import time
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from specjax.cache import KVCache, init_cache
from specjax.drafters.base import TargetFeatures
from specjax.kernels import use_kernels
from specjax.policy import SpeculationPolicy, choose_branch, init_policy_state, update_policy_state
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
  k_R: jax.Array               # drafts proposed in each round (fixed K, or the adaptive policy's choice)
  prompt_features: Any = ()    # TargetFeatures of the prompt for feature-level drafters; consumed by their init
  policy: Any = ()             # PolicyState when K is chosen per round


@flax.struct.dataclass
class RoundOutput:
  """What a round produces before it is committed (the phase-split benchmark times these separately)."""

  n_accepted_B: jax.Array
  next_token_B: jax.Array
  draft_BxK: jax.Array




def feature_layers_of(drafter):
  return None if drafter is None else drafter.feature_layers


def row_keys(seed_key: jax.Array, batch: int) -> jax.Array:
  """One independent key per row: a batch of N copies of a prompt gives N independent samples."""
  return jax.vmap(lambda i: jax.random.fold_in(seed_key, i))(jnp.arange(batch))


def target_features(target, tokens_BxT, positions_BxT, cache, feature_layers):
  """Logits, updated cache and (when feature_layers is not None) the TargetFeatures of these positions."""
  hidden, cache, collected = target.hidden_states(tokens_BxT, positions_BxT, cache,
                                                  collect_layers=tuple(feature_layers or ()))
  features = None
  if feature_layers is not None:
    layers = (jnp.stack(collected, axis=2) if collected
              else jnp.zeros(hidden.shape[:2] + (0, hidden.shape[2]), hidden.dtype))
    features = TargetFeatures(hidden_BxTxD=hidden, layers_BxTxLxD=layers)
  return hidden, cache, features


def prefill(target, tokens_BxS, prompt_len_B, max_new_B, row_keys_B, *, sampling, prompt_bucket: int,
            eos_ids: tuple, max_rounds: int, mesh=None, feature_layers=None) -> DecodeState:
  """Runs the prompt through the target and samples each row's first new token (no drafter state yet)."""
  batch, size = tokens_BxS.shape
  rows_B = jnp.arange(batch)
  cache = init_cache(target.config, batch, size)
  if mesh is not None:
    from specjax.sharding import cache_sharding
    cache = jax.lax.with_sharding_constraint(cache, cache_sharding(mesh, target.config, batch))
  positions = jnp.broadcast_to(jnp.arange(prompt_bucket, dtype=jnp.int32), (batch, prompt_bucket))
  hidden, cache, features = target_features(target, tokens_BxS[:, :prompt_bucket], positions, cache, feature_layers)
  logits_BxV = target.logits(hidden[rows_B, prompt_len_B - 1])
  keys_B = jax.vmap(lambda key: jax.random.fold_in(key, 0))(row_keys_B)
  first_B = jax.vmap(sample)(keys_B, distribution(logits_BxV, sampling))
  tokens_BxS = tokens_BxS.at[rows_B, prompt_len_B].set(first_B)
  return DecodeState(
      tokens_BxS=tokens_BxS,
      seq_len_B=prompt_len_B + 1,
      n_new_B=jnp.ones((batch,), jnp.int32),
      done_B=(max_new_B <= 1) | _is_eos(first_B, eos_ids),
      cache=cache.with_lengths(prompt_len_B),
      draft_state=(),
      row_keys_B=row_keys_B,
      round=jnp.int32(0),
      accepted_RxB=jnp.full((max_rounds, batch), -1, jnp.int32),
      emitted_RxB=jnp.zeros((max_rounds, batch), jnp.int32),
      k_R=jnp.zeros((max_rounds,), jnp.int32),
      prompt_features=features if features is not None else (),
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
    draft_state = (drafter.observe(drafter_params, state.draft_state, state.tokens_BxS, state.seq_len_B)
                   if drafter is not None else state.draft_state)
    return jnp.zeros((batch, 0), jnp.int32), jnp.zeros((batch, 0, vocab_size), jnp.float32), draft_state
  draft_keys, _ = round_keys(state)
  draft_BxK, q_BxKxV, draft_state = drafter.propose(drafter_params, state.draft_state, state.tokens_BxS,
                                                    state.seq_len_B, k, sampling, draft_keys)
  if q_BxKxV is None:
    q_BxKxV = jax.nn.one_hot(draft_BxK, vocab_size, dtype=jnp.float32)
  return draft_BxK.astype(jnp.int32), q_BxKxV, draft_state


def verify(target, state: DecodeState, draft_BxK: jax.Array, feature_layers=None):
  """ONE target call over the K+1 positions [last token, d_1..d_K] at each row's own offsets: logits, the cache
  with those positions written, and their TargetFeatures when feature_layers is not None."""
  batch, k = draft_BxK.shape
  rows_B = jnp.arange(batch)
  last_B = state.tokens_BxS[rows_B, state.seq_len_B - 1]
  inputs_BxK1 = jnp.concatenate([last_B[:, None], draft_BxK], axis=1)
  positions_BxK1 = state.seq_len_B[:, None] - 1 + jnp.arange(k + 1, dtype=jnp.int32)[None, :]
  hidden, cache, features = target_features(target, inputs_BxK1, positions_BxK1, state.cache, feature_layers)
  return target.logits(hidden), cache, features


def accept_and_commit(drafter, drafter_params, state: DecodeState, logits_BxK1xV, q_BxKxV, draft_BxK, cache,
                      draft_state, max_new_B, *, sampling, eos_ids: tuple, features=None) -> DecodeState:
  """Rejection sampling, then per-row commit: tokens, lengths (the cache rollback), stops and stats."""
  batch, k = draft_BxK.shape
  rows_B = jnp.arange(batch)
  _, accept_keys = round_keys(state)
  p_BxK1xV = distribution(logits_BxK1xV, sampling)
  n_accepted_B, next_B = accept(p_BxK1xV, q_BxKxV, draft_BxK, accept_keys, greedy=sampling.greedy)

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
    draft_state = drafter.commit(drafter_params, draft_state, n_accepted_B, seq_len_B, features=features)
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
      k_R=state.k_R.at[state.round].set(k),
  )


def adaptive_round(target, drafter, drafter_params, state: DecodeState, max_new_B, round_cost_N, *,
                   policy: SpeculationPolicy, sampling, eos_ids: tuple) -> DecodeState:
  """The autoregressive steps the policy picks in a row, then (unless the generation ended) one speculative round
  at the K it picks. The steps run as their own loop with the plain autoregressive body, so that speculation
  turned off costs what autoregressive decoding costs; only a speculative round goes through the `lax.switch`.
  A round is also autoregressive when the drafter expects no active row to be worth verifying
  (`Drafter.worth_verifying`)."""
  def choice(state):
    tokens_left = jnp.max(jnp.where(state.done_B, 0, max_new_B - state.n_new_B))
    return choose_branch(policy, state.policy, round_cost_N, state.round, tokens_left)

  def wants_autoregressive(state):
    return unfinished(state) & ((choice(state) == 0) | ~some_row_worth_verifying(state))

  def some_row_worth_verifying(state):
    worth_B = drafter.worth_verifying(drafter_params, state.draft_state, state.tokens_BxS, state.seq_len_B)
    if worth_B is None:
      return jnp.bool_(True)
    return jnp.any(worth_B & ~state.done_B) | (state.policy.forced_branch >= 0)

  def round_at(branch, k, state):
    new_state = speculative_round(target, drafter, drafter_params, state, max_new_B, k=k, sampling=sampling,
                                  eos_ids=eos_ids)
    n_accepted_B = jnp.maximum(new_state.accepted_RxB[state.round], 0)
    return new_state.replace(policy=update_policy_state(policy, state.policy, branch, jnp.int32(k), n_accepted_B,
                                                        ~state.done_B, round_cost_N))

  state = jax.lax.while_loop(wants_autoregressive, functools.partial(round_at, jnp.int32(0), 0), state)
  branch = jnp.where(unfinished(state), choice(state), 0)
  # Branch 0 is reached only when the generation has ended (or calibration forces it): then nothing runs.
  branches = [lambda state: state] + [functools.partial(round_at, jnp.int32(i + 1), k)
                                      for i, k in enumerate(policy.ks)]
  return jax.lax.switch(branch, branches, state)


def unfinished(state: DecodeState) -> jax.Array:
  """Some row still generates and the round log has room."""
  return jnp.any(~state.done_B) & (state.round < state.accepted_RxB.shape[0])


def speculative_round(target, drafter, drafter_params, state: DecodeState, max_new_B, *, k: int, sampling,
                      eos_ids: tuple) -> DecodeState:
  draft_BxK, q_BxKxV, draft_state = draft(drafter, drafter_params, state, k=k, sampling=sampling,
                                          vocab_size=target.config.vocab_size)
  logits_BxK1xV, cache, features = verify(target, state, draft_BxK, feature_layers_of(drafter))
  return accept_and_commit(drafter, drafter_params, state, logits_BxK1xV, q_BxKxV, draft_BxK, cache, draft_state,
                           max_new_B, sampling=sampling, eos_ids=eos_ids, features=features)


@functools.partial(jax.jit, static_argnames=("graphdef", "sampling", "eos_ids", "prompt_bucket", "mesh",
                                             "feature_layers"), donate_argnames=("tokens_BxS",))
def prefill_program(target_params, tokens_BxS, prompt_len_B, max_new_B, seed_key, *, graphdef,
                    sampling: SamplingParams, eos_ids: tuple, prompt_bucket: int, mesh=None,
                    feature_layers=None) -> DecodeState:
  """The prompt through the target and each row's first token, as one program."""
  with use_kernels(mesh is None):
    return prefill(nnx.merge(graphdef, target_params), tokens_BxS, prompt_len_B, max_new_B,
                   row_keys(seed_key, tokens_BxS.shape[0]), sampling=sampling, prompt_bucket=prompt_bucket,
                   eos_ids=eos_ids, max_rounds=tokens_BxS.shape[1], mesh=mesh, feature_layers=feature_layers)


@functools.partial(jax.jit, static_argnames=("graphdef", "drafter", "sampling", "k", "eos_ids", "prompt_bucket", "mesh"),
                   donate_argnames=("state",))
def decode_program(target_params, drafter_params, state: DecodeState, prompt_len_B, max_new_B, policy_inputs=(), *,
                   graphdef, drafter, sampling: SamplingParams, k, eos_ids: tuple, prompt_bucket: int,
                   mesh=None) -> DecodeState:
  """The drafter's prefill, then rounds until every row is done, as one program.

  k: an int (fixed drafts per round; 0 = autoregressive) or a SpeculationPolicy, which then needs
  policy_inputs = (round_cost_N, forced_branch) (see `specjax.policy`).
  """
  with use_kernels(mesh is None):  # shardings arrive with the state and parameters
    return _decode(nnx.merge(graphdef, target_params), drafter, drafter_params, state, prompt_len_B, max_new_B,
                   policy_inputs, sampling=sampling, k=k, eos_ids=eos_ids, prompt_bucket=prompt_bucket)


def _decode(target, drafter, drafter_params, state, prompt_len_B, max_new_B, policy_inputs, *, sampling, k, eos_ids,
            prompt_bucket):
  if drafter is not None:
    features = state.prompt_features if drafter.feature_layers is not None else None
    state = state.replace(draft_state=drafter.init(drafter_params, state.tokens_BxS, prompt_len_B, prompt_bucket,
                                                   features=features), prompt_features=())

  if isinstance(k, SpeculationPolicy):
    round_cost_N, forced_branch = policy_inputs
    state = state.replace(policy=init_policy_state(k, forced_branch, round_cost_N))

    def body(state):
      return adaptive_round(target, drafter, drafter_params, state, max_new_B, round_cost_N, policy=k,
                            sampling=sampling, eos_ids=eos_ids)
  else:
    def body(state):
      return speculative_round(target, drafter, drafter_params, state, max_new_B, k=k, sampling=sampling,
                               eos_ids=eos_ids)

  return jax.lax.while_loop(unfinished, body, state)


def prefill_for(target_params, tokens_BxS, prompt_len_B, max_new_B, seed_key, *, graphdef, drafter,
                sampling: SamplingParams, eos_ids: tuple, prompt_bucket: int, mesh=None) -> DecodeState:
  """The prefill program, keeping the target hidden states `drafter` starts from (feature heads)."""
  return prefill_program(target_params, tokens_BxS, prompt_len_B, max_new_B, seed_key, graphdef=graphdef,
                         sampling=sampling, eos_ids=eos_ids, prompt_bucket=prompt_bucket, mesh=mesh,
                         feature_layers=feature_layers_of(drafter))


def generate_program(target_params, drafter_params, tokens_BxS, prompt_len_B, max_new_B, seed_key, *, graphdef,
                     drafter, sampling: SamplingParams, k, eos_ids: tuple, prompt_bucket: int, mesh=None,
                     timings: dict | None = None, policy_inputs=()) -> DecodeState:
  """The whole generation: the prefill program, then the decode program. With `timings`, waits for the first
  tokens and records `first_token_s` (time to first token, compilation included on a first call)."""
  start = time.perf_counter()
  state = prefill_for(target_params, tokens_BxS, prompt_len_B, max_new_B, seed_key, graphdef=graphdef,
                      drafter=drafter, sampling=sampling, eos_ids=eos_ids, prompt_bucket=prompt_bucket, mesh=mesh)
  if timings is not None:
    jax.block_until_ready(state.n_new_B)
    timings["first_token_s"] = time.perf_counter() - start
  return decode_program(target_params, drafter_params, state, prompt_len_B, max_new_B, policy_inputs, graphdef=graphdef,
                        drafter=drafter, sampling=sampling, k=k, eos_ids=eos_ids, prompt_bucket=prompt_bucket,
                        mesh=mesh)
