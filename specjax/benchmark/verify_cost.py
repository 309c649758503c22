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


def scoring_call(target, *, batch: int, positions: int, filled: int, cache_size: int, tree=None):
  """A zero-argument callable returning logits: the target's scoring call over `positions` positions a row after
  `filled` cached ones, as `engine.verify` runs it (the CPU kernels on a CPU; with `tree`, a StaticTree of
  positions - 1 nodes, its attention). The call donates its cache, so each runs on the one the last returned."""
  fill_B = jnp.full((batch,), filled, jnp.int32)
  tokens_BxT = jnp.ones((batch, positions), jnp.int32)
  positions_BxT = fill_B[:, None] + jnp.arange(positions, dtype=jnp.int32)[None, :]
  parent_BxN = None if tree is None else jnp.broadcast_to(jnp.asarray(tree.parents, jnp.int32), (batch, tree.n_nodes))
  spec = TargetSpec(graphdef=target.graphdef, kernels=jax.default_backend() == "cpu")
  params = params_for(target, spec)
  state = {"cache": init_cache(target.config, batch, cache_size).with_lengths(fill_B)}

  def call():
    logits, state["cache"] = score_program(params, tokens_BxT, positions_BxT, state["cache"], parent_BxN, spec=spec)
    return logits

  return call


def paired_seconds(call_a, call_b, calls: int) -> tuple[np.ndarray, np.ndarray]:
  """Seconds of each of `calls` alternated pairs of two calls (which goes first alternates, so that drift within a
  pair cancels), after two untimed calls of each (compile, then once more warm)."""
  def timed(call) -> float:
    start = time.perf_counter()
    jax.block_until_ready(call())
    return time.perf_counter() - start

  for call in (call_a, call_b, call_a, call_b):
    timed(call)
  a_s, b_s = [], []
  for i in range(calls):
    for call in ((call_a, call_b) if i % 2 == 0 else (call_b, call_a)):
      (a_s if call is call_a else b_s).append(timed(call))
  return np.asarray(a_s), np.asarray(b_s)


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
  shape = dict(batch=batch, filled=filled, cache_size=cache_size)
  step, verify = paired_seconds(scoring_call(target, positions=1, **shape),
                                scoring_call(target, positions=k + 1, tree=tree, **shape), calls)
  record = {"batch_size": batch, "k": k, "filled": filled, "step_ms": 1e3 * float(np.median(step)),
            "verify_ms": 1e3 * float(np.median(verify)), "ratio": float(np.median(verify / step))}
  return record if tree is None else dict(record, tree_paths=[list(path) for path in tree.paths])
