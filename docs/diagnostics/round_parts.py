"""Where a fused round's time goes beyond its parts (docs/results.md section 14): each part runs R times in one
program (a fori_loop, so dispatch does not count), alternated with the others, medians per repetition.

  python docs/diagnostics/round_parts.py q4 5     # draft source (q4 | int8 | a GGUF path), repetitions

draft: the K draft steps alone, its weights warm in cache; draft_flush - flush: the same after reading 540 MB (the
target's weights stream through the 105 MB L3 in every verification); verify5 / step1: K + 1 = 5 positions / one;
dv: draft then verify; acc: acceptance and commit; round: the whole speculative round. Sampling: temperature 1.
"""
import functools
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax import host
from specjax.cli import drafter_from_config, model_from_source
from specjax.engine import programs, round as rnd
from specjax.generate import encode_prompts

target = model_from_source("smollm2-135m")
K, R = 4, 16
drafter = drafter_from_config("quantized", target, sys.argv[1] if len(sys.argv) > 1 else "q4")
ids = encode_prompts(target, ["Write a Python function that checks whether a string is a palindrome."], chat=True)
batch = host.prepare(target, ids, max_new_tokens=200, drafter=drafter, k=K)
spec, dp = batch.spec, drafter.params()
tp = programs.params_for(target, spec)
inputs = (jnp.asarray(batch.tokens_BxS), jnp.asarray(batch.prompt_len_B), jnp.asarray(batch.max_new_B))
state = programs.prefill_for(tp, *inputs, jax.random.key(0), spec=spec)
state = jax.jit(lambda s, pl: rnd.init_drafter(spec.drafter, dp, s, pl, spec.prompt_bucket))(state, inputs[1])
vocab = target.config.vocab_size
fixed_drafts = jnp.zeros((1, K), jnp.int32) + 100
weights_sized = jnp.ones((135_000_000,), jnp.float32)


def draft_once(st):
  return rnd.draft(spec.drafter, dp, st, k=K, sampling=spec.sampling, vocab_size=vocab)


@jax.jit
def draft_loop(state):
  return jax.lax.fori_loop(0, R, lambda i, st: draft_once(st)[2], state)


@jax.jit
def flush_loop(big):
  return jax.lax.fori_loop(0, R, lambda i, a: a + jnp.sum(big * (i + 1.0)), 0.0)


@jax.jit
def draft_flush_loop(state, big):
  def body(i, carry):
    drafts, _, st = draft_once(carry[0])
    return st, carry[1] + jnp.sum(big * (drafts[0, 0] + 1.0))
  return jax.lax.fori_loop(0, R, body, (state, 0.0))


def verify_loop(k):
  @jax.jit
  def run(tp, state):
    with programs.traced(spec, tp) as t:
      def body(i, cache):
        return rnd.verify(t, state.replace(cache=cache), fixed_drafts[:, :k])[1]
      return jax.lax.fori_loop(0, R, body, state.cache)
  return run


@jax.jit
def dv_loop(tp, state):
  with programs.traced(spec, tp) as t:
    def body(i, st):
      drafts, _, drafted = draft_once(st)   # the drafter's new state in it (a shared cache: its entries too)
      return drafted.replace(cache=rnd.verify(t, drafted, drafts)[1])
    return jax.lax.fori_loop(0, R, body, state)


@jax.jit
def acc_loop(state, logits, q, drafts):
  def body(i, s):
    return rnd.accept_and_commit(spec.drafter, dp, s, logits, q, drafts, s.cache, s.draft_state, inputs[2],
                                 sampling=spec.sampling, eos_ids=())
  return jax.lax.fori_loop(0, R, body, state)


@jax.jit
def round_loop(tp, state):
  with programs.traced(spec, tp) as t:
    body = functools.partial(rnd.speculative_round, t, spec.drafter, dp, max_new_B=inputs[2], k=K,
                             sampling=spec.sampling, eos_ids=())
    return jax.lax.fori_loop(0, R, lambda i, s: body(state=s), state)


@jax.jit
def logits_of(tp, state, drafts):
  with programs.traced(spec, tp) as t:
    return rnd.verify(t, state, drafts)[0]


drafts0, q0, _ = jax.jit(draft_once)(state)
logits0 = logits_of(tp, state, drafts0)
verify5, step1 = verify_loop(K), verify_loop(0)
parts = {"flush": lambda: flush_loop(weights_sized), "draft_flush": lambda: draft_flush_loop(state, weights_sized),
         "dv": lambda: dv_loop(tp, state), "acc": lambda: acc_loop(state, logits0, q0, drafts0),
         "draft": lambda: draft_loop(state), "verify5": lambda: verify5(tp, state), "step1": lambda: step1(tp, state),
         "round": lambda: round_loop(tp, state)}
for run in parts.values():
  jax.block_until_ready(run())
times = {name: [] for name in parts}
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 5):
  for name, run in parts.items():
    start = time.perf_counter()
    jax.block_until_ready(run())
    times[name].append((time.perf_counter() - start) / R * 1e3)
m = {name: float(np.median(t)) for name, t in times.items()}
step = m["step1"]
print({name: round(v, 2) for name, v in m.items()}, "ms per repetition")
print(f"draft after a 540 MB read: {m['draft_flush'] - m['flush']:.1f} ms, warm: {m['draft']:.1f} ms")
print(f"c warm {m['draft'] / K / step:.3f}, c cold {(m['draft_flush'] - m['flush']) / K / step:.3f}, "
      f"verify {m['verify5'] / step:.3f}, acceptance {m['acc'] / step:.3f} steps; round {m['round'] / step:.3f} "
      f"steps, draft + verify in one loop / apart {m['dv'] / (m['draft'] + m['verify5']):.3f}")
