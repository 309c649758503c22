"""Paired verification cost: the target call over K+1 positions against a one-position step from the same cache
fill, called alternately so that drift on a shared machine moves both; the ratio is the median of the per-pair
ratios. (The phase split times the two in different cells, minutes apart: its ratio swung 1.25x-1.43x between
runs of the same command.)"""

import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.cache import init_cache
from specjax.engine import params_for, score_program
from specjax.spec import TargetSpec


def paired_verify_cost(target, *, batch: int, k: int, filled: int, cache_size: int, calls: int, tree=None) -> dict:
  """{"batch_size", "k", "filled", "step_ms", "verify_ms", "ratio"}: medians over `calls` alternated pairs of a
  one-position call and a K+1-position call, each row holding `filled` cached positions. With `tree` (a
  StaticTree of K nodes) the K+1 positions are its root and nodes, scored with its attention, as a tree round
  does; the record then also names the tree."""
  if calls < 1 or k < 1 or batch < 1 or filled < 0:
    raise ValueError(f"paired_verify_cost needs calls, k, batch >= 1 and filled >= 0; got {calls}, {k}, {batch}, "
                     f"{filled}")
  if tree is not None and tree.n_nodes != k:
    raise ValueError(f"a tree of {tree.n_nodes} nodes verifies K = {tree.n_nodes} positions after its root, not {k}")
  if filled + k + 1 > cache_size:
    raise ValueError(f"filled {filled} + K+1 {k + 1} positions exceed the cache size {cache_size}")
  fill_B = jnp.full((batch,), filled, jnp.int32)
  inputs, caches = {}, {}  # each cache its own arrays: the call donates them
  for t in (1, k + 1):
    inputs[t] = (jnp.ones((batch, t), jnp.int32), fill_B[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :])
    caches[t] = init_cache(target.config, batch, cache_size).with_lengths(jnp.full((batch,), filled, jnp.int32))

  # The scoring call of the unsharded decode program, as `engine.verify` runs it (the CPU kernels on a CPU).
  spec = TargetSpec(graphdef=target.graphdef, kernels=jax.default_backend() == "cpu")
  params = params_for(target, spec)

  parents = {1: None, k + 1: None if tree is None else jnp.broadcast_to(jnp.asarray(tree.parents, jnp.int32),
                                                                         (batch, k))}

  def timed(t: int) -> float:
    start = time.perf_counter()
    logits, caches[t] = score_program(params, *inputs[t], caches[t], parents[t], spec=spec)
    jax.block_until_ready(logits)
    return time.perf_counter() - start

  for t in (1, k + 1, 1, k + 1):  # compile, then once more warm
    timed(t)
  step_s, verify_s = [], []
  for i in range(calls):
    for t in ((1, k + 1) if i % 2 == 0 else (k + 1, 1)):
      (step_s if t == 1 else verify_s).append(timed(t))
  step, verify = np.asarray(step_s), np.asarray(verify_s)
  record = {"batch_size": batch, "k": k, "filled": filled, "step_ms": 1e3 * float(np.median(step)),
            "verify_ms": 1e3 * float(np.median(verify)), "ratio": float(np.median(verify / step))}
  return record if tree is None else dict(record, tree_paths=[list(path) for path in tree.paths])
