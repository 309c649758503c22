"""One quantized product at a time (docs/results.md section 14): each shape and scheme in a fori_loop of 400 calls
(its blocks stay in L2), 7 repetitions, median and minimum per call.

  python docs/diagnostics/quant_kernel_bench.py
"""
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.kernels.quantized import quantized_dense
from specjax.quantize import quantize

rng = np.random.default_rng(0)


def per_call(n: int, k: int, scheme: str, reps: int = 400):
  weight = quantize(rng.standard_normal((n, k)).astype(np.float32) * 0.05, scheme)
  x = jnp.asarray(rng.standard_normal((1, k)).astype(np.float32))

  @jax.jit
  def loop(x):
    return jax.lax.fori_loop(0, reps, lambda i, x: x + 1e-6 * quantized_dense(x, weight)[:, :1], x)

  jax.block_until_ready(loop(x))
  times = []
  for _ in range(7):
    start = time.perf_counter()
    jax.block_until_ready(loop(x))
    times.append((time.perf_counter() - start) / reps)
  return float(np.median(times)), float(np.min(times))


for n, k in [(576, 576), (1536, 576), (576, 1536), (192, 576)]:
  for scheme in ("q4_1", "q8_0", "int8"):
    median, fastest = per_call(n, k, scheme)
    print(f"{scheme:5s} N={n:5d} K={k:5d}  median {median * 1e6:7.1f} us  min {fastest * 1e6:7.1f} us  "
          f"{n * k / median / 1e9:5.2f} GMAC/s")
