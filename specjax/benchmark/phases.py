"""Phase-split mode: the engine's round functions jitted one by one and timed with `block_until_ready`.

A fused `lax.while_loop` cannot be timed inside, so this runner steps rounds from the host: draft, verify,
accept/commit, each its own compiled program, calling the same `specjax.engine` functions the fused loop uses.
It costs host round trips the fused loop does not have; use it for the split of a round's time, and the fused
loop for end-to-end figures.
"""

import functools
import time

import jax

from specjax import engine


@functools.partial(jax.jit, static_argnames=("spec",))
def _drafter_init(drafter_params, state, prompt_len_B, *, spec):
  return engine.init_drafter(spec.drafter, drafter_params, state, prompt_len_B, spec.prompt_bucket)


@functools.partial(jax.jit, static_argnames=("spec", "vocab_size"))
def _draft(drafter_params, state, *, spec, vocab_size):
  return engine.draft(spec.drafter, drafter_params, state, k=spec.k, sampling=spec.sampling, vocab_size=vocab_size)


@functools.partial(jax.jit, static_argnames=("spec",))
def _verify(target_params, state, draft_BxK, *, spec):
  with engine.traced(spec, target_params) as target:
    return engine.verify(target, state, draft_BxK, spec.feature_layers)


@functools.partial(jax.jit, static_argnames=("spec",))
def _accept(drafter_params, state, logits, q, draft_BxK, cache, draft_state, max_new_B, features, *, spec):
  return engine.accept_and_commit(spec.drafter, drafter_params, state, logits, q, draft_BxK, cache, draft_state,
                                  max_new_B, sampling=spec.sampling, eos_ids=spec.eos_ids, features=features)


def run_phase_split(target, batch, seed_key, *, warmup: bool = True):
  """Generates a `host.PreparedBatch` (fixed K) like the fused decode program, round by round from the host.

  Returns (final DecodeState, per-round timings [{"draft_s", "verify_s", "accept_s"}]). With warmup, one
  untimed round is run first from the initial state (its result discarded) so that compilation is not timed.
  """
  spec = batch.spec
  if spec.adaptive:
    raise ValueError("the phase split times fixed-K rounds; an adaptive spec mixes K per round")
  vocab = target.config.vocab_size
  drafter_params = spec.drafter.params() if spec.drafter is not None else ()
  tokens_BxS, prompt_len_B, max_new_B = (jax.numpy.asarray(x) for x in
                                         (batch.tokens_BxS, batch.prompt_len_B, batch.max_new_B))
  target_params = engine.params_for(target, spec)
  state = engine.prefill_for(target_params, tokens_BxS, prompt_len_B, max_new_B, seed_key, spec=spec)
  state = _drafter_init(drafter_params, state, prompt_len_B, spec=spec)
  # Committed like the states _accept returns (a jit output is committed when any input is, e.g. drafter weights
  # placed with device_put), so that every round calls the programs the warmup compiled.
  state = jax.block_until_ready(jax.tree.map(lambda x: jax.device_put(x, x.sharding), state))

  def one_round(state, timings):
    t0 = time.perf_counter()
    draft_BxK, q, state = jax.block_until_ready(_draft(drafter_params, state, spec=spec, vocab_size=vocab))
    t1 = time.perf_counter()
    logits, cache, features = jax.block_until_ready(_verify(target_params, state, draft_BxK, spec=spec))
    t2 = time.perf_counter()
    state = jax.block_until_ready(_accept(drafter_params, state, logits, q, draft_BxK, cache, state.draft_state,
                                          max_new_B, features, spec=spec))
    t3 = time.perf_counter()
    if timings is not None:
      timings.append({"draft_s": t1 - t0, "verify_s": t2 - t1, "accept_s": t3 - t2})
    return state

  if warmup:
    one_round(state, None)
  timings = []
  while bool(jax.device_get(engine.unfinished(state))):
    state = one_round(state, timings)
  return state, timings
