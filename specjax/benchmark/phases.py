"""Phase-split mode: the engine's round functions jitted one by one and timed with `block_until_ready`.

A fused `lax.while_loop` cannot be timed inside, so this runner steps rounds from the host: draft, verify,
accept/commit, each its own compiled program, calling the same `specjax.engine` functions the fused loop uses.
It costs host round trips the fused loop does not have; use it for the split of a round's time, and the fused
loop for end-to-end figures.
"""

import functools
import time

import jax
import numpy as np
from flax import nnx

from specjax import engine


@functools.partial(jax.jit, static_argnames=("drafter", "prompt_bucket"))
def _drafter_init(drafter_params, tokens_BxS, prompt_len_B, features, *, drafter, prompt_bucket):
  return drafter.init(drafter_params, tokens_BxS, prompt_len_B, prompt_bucket,
                      features=features if drafter.feature_layers is not None else None)


@functools.partial(jax.jit, static_argnames=("drafter", "k", "sampling", "vocab_size"))
def _draft(drafter_params, state, *, drafter, k, sampling, vocab_size):
  return engine.draft(drafter, drafter_params, state, k=k, sampling=sampling, vocab_size=vocab_size)


@functools.partial(jax.jit, static_argnames=("graphdef", "feature_layers"))
def _verify(target_params, state, draft_BxK, *, graphdef, feature_layers):
  return engine.verify(nnx.merge(graphdef, target_params), state, draft_BxK, feature_layers)


@functools.partial(jax.jit, static_argnames=("drafter", "sampling", "eos_ids"))
def _accept(drafter_params, state, logits, q, draft_BxK, cache, draft_state, max_new_B, features, *, drafter,
            sampling, eos_ids):
  return engine.accept_and_commit(drafter, drafter_params, state, logits, q, draft_BxK, cache, draft_state,
                                  max_new_B, sampling=sampling, eos_ids=eos_ids, features=features)


def run_phase_split(target, drafter, tokens_BxS, prompt_len_B, max_new_B, seed_key, *, k: int, sampling,
                    eos_ids: tuple, prompt_bucket: int, warmup: bool = True):
  """Generates like `engine.generate_program`, round by round from the host.

  Returns (final DecodeState, per-round timings [{"draft_s", "verify_s", "accept_s"}]). With warmup, one
  untimed round is run first from the initial state (its result discarded) so that compilation is not timed.
  """
  vocab = target.config.vocab_size
  drafter_params = drafter.params() if drafter is not None else ()
  max_rounds = tokens_BxS.shape[1]
  feature_layers = engine.feature_layers_of(drafter)
  state = engine.prefill_for(target.params, tokens_BxS, prompt_len_B, max_new_B, seed_key, graphdef=target.graphdef,
                             drafter=drafter, sampling=sampling, eos_ids=eos_ids, prompt_bucket=prompt_bucket)
  if drafter is not None:
    state = state.replace(draft_state=_drafter_init(drafter_params, state.tokens_BxS, prompt_len_B,
                                                    state.prompt_features, drafter=drafter,
                                                    prompt_bucket=prompt_bucket), prompt_features=())
  # Committed like the states _accept returns (a jit output is committed when any input is, e.g. drafter weights
  # placed with device_put), so that every round calls the programs the warmup compiled.
  state = jax.block_until_ready(jax.tree.map(lambda x: jax.device_put(x, x.sharding), state))

  def one_round(state, timings):
    t0 = time.perf_counter()
    draft_BxK, q, draft_state = jax.block_until_ready(
        _draft(drafter_params, state, drafter=drafter, k=k, sampling=sampling, vocab_size=vocab))
    t1 = time.perf_counter()
    logits, cache, features = jax.block_until_ready(_verify(target.params, state, draft_BxK,
                                                            graphdef=target.graphdef, feature_layers=feature_layers))
    t2 = time.perf_counter()
    state = jax.block_until_ready(_accept(drafter_params, state, logits, q, draft_BxK, cache, draft_state, max_new_B,
                                          features, drafter=drafter, sampling=sampling, eos_ids=eos_ids))
    t3 = time.perf_counter()
    if timings is not None:
      timings.append({"draft_s": t1 - t0, "verify_s": t2 - t1, "accept_s": t3 - t2})
    return state

  if warmup:
    one_round(state, None)
  timings = []
  while not bool(np.all(jax.device_get(state.done_B))) and int(state.round) < max_rounds:
    state = one_round(state, timings)
  return state, timings
