"""The packed view with q|k|v and gate|up each one kernel call (what the engine runs) against one call per kernel,
on SmolLM2-135M: 8 decode steps of T positions in one compiled loop at a 500-token context, PAIRS paired calls in
alternating order; prints the medians per step and the median of the paired ratios.

  python docs/diagnostics/fused_projections.py [T ...]   (default 1 5)
"""

import os
import statistics
import sys
import time

os.environ.setdefault("SPECJAX_PACKED_MIN_ROWS", "1")   # both views on the packed kernel at every T

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import specjax
from specjax.cli import model_from_source
from specjax.engine import params_for
from specjax.kernels import packed
from specjax.spec import TargetSpec

PAIRS, STEPS, CONTEXT = 40, 8, 500


def unfused_view(model) -> nnx.State:
  """The packed view as it was before fused groups: every kernel its own tiles."""
  leaves = []
  for path, var in nnx.to_flat_state(model.params):
    w = var[...]
    if packed._is_packable(path, w, bool(model.config.tie_embeddings)):
      table = str(path[-1]) == "embed"
      tiles = packed.pack_rows(w) if table else packed.pack(w)
      var = var.replace(packed.PackedKernel(kernel=w, tiles=tiles, transposed=table))
    leaves.append((path, var))
  return nnx.from_flat_state(leaves)


def main(query_lens):
  target = model_from_source("smollm2-135m", "")
  views = {"fused": params_for(target, TargetSpec(graphdef=target.graphdef)), "separate": unfused_view(target)}

  def steps(params, tokens, positions, cache):
    model = nnx.merge(target.graphdef, params)

    def body(i, carry):
      total, cache = carry
      logits, _, cache = model(tokens, positions + i, cache)
      return total + logits[:, :1, :8], cache
    return jax.lax.fori_loop(0, STEPS, body, (jnp.zeros((1, 1, 8)), cache))

  run = jax.jit(steps, donate_argnums=3)
  for t_len in query_lens:
    cache = specjax.cache.init_cache(target.config, 1, 1024).with_lengths(jnp.array([CONTEXT]))
    tokens = jnp.ones((1, t_len), jnp.int32)
    positions = CONTEXT + jnp.arange(t_len, dtype=jnp.int32)[None]
    outs = {}
    for name, view in views.items():
      outs[name], cache = run(view, tokens, positions, cache)
    np.testing.assert_allclose(np.asarray(outs["fused"]), np.asarray(outs["separate"]), rtol=1e-3, atol=1e-3)
    seconds = {name: [] for name in views}
    for pair in range(PAIRS):
      for name in (("fused", "separate") if pair % 2 else ("separate", "fused")):
        start = time.perf_counter()
        out, cache = run(views[name], tokens, positions, cache)
        out.block_until_ready()
        seconds[name].append((time.perf_counter() - start) / STEPS)
    ratio = statistics.median(f / s for f, s in zip(seconds["fused"], seconds["separate"]))
    print(f"T={t_len}: fused {1e3 * statistics.median(seconds['fused']):.2f} ms, separate "
          f"{1e3 * statistics.median(seconds['separate']):.2f} ms a step; paired ratio {ratio:.3f}", flush=True)


if __name__ == "__main__":
  main([int(arg) for arg in sys.argv[1:]] or [1, 5])
