"""The packed float32 linear (`specjax.kernels.packed`) against the plain CPU kernel on SmolLM2-135M (docs/results.md
section 17): each of a layer's products and the tied head at M rows (reps calls in one program on distinct weights,
medians of 7), then the whole scoring call at T positions, plain and packed parameters alternated in pairs.

  python docs/diagnostics/packed_linear.py 1 5 17 33
"""
import os
import sys
import time

os.environ.setdefault("SPECJAX_PACKED_MIN_ROWS", "1")   # "packed" is the packed kernel at every row count

import jax
import jax.numpy as jnp
import numpy as np

from specjax.cache import init_cache
from specjax.cli import model_from_source
from specjax.engine import params_for, score_program
from specjax.kernels import linear, packed
from specjax.spec import TargetSpec

ROWS = [int(a) for a in sys.argv[1:]] or [1, 5, 17]
SHAPES = [(576, 576, False), (576, 192, False), (576, 1536, False), (1536, 576, False), (576, 49152, True)]


def chained(dense, m):
  """reps dependent products in one program, so that neither dispatch nor a weight copy is timed."""
  def run(x, weights):
    acc = jnp.zeros((m, 1))
    for w in weights:
      acc = acc + dense(x + acc * 0, w)[:, :1]
    return acc
  return jax.jit(run)


for k_dim, n_dim, tied in SHAPES:
  reps = 3 if tied else 30
  plain = [jax.random.normal(jax.random.key(i), (n_dim, k_dim) if tied else (k_dim, n_dim)) for i in range(reps)]
  tiled = [packed.PackedKernel(w, packed.pack(w.T if tied else w), tied) for w in plain]
  cells = []
  for m in ROWS:
    x = jax.random.normal(jax.random.key(1), (m, k_dim))
    seconds = {}
    for name, fn, weights in (("plain", lambda x, w: linear.dense(x, w, transposed=tied), plain),
                              ("packed", packed.packed_dense, tiled)):
      call = chained(fn, m)
      call(x, weights).block_until_ready()
      times = []
      for _ in range(7):
        start = time.perf_counter()
        call(x, weights).block_until_ready()
        times.append((time.perf_counter() - start) / reps)
      seconds[name] = float(np.median(times))
    gflops = 2 * m * k_dim * n_dim / seconds["packed"] / 1e9
    cells.append(f"M={m}: plain {1e6 * seconds['plain']:.0f} us, packed {1e6 * seconds['packed']:.0f} us "
                 f"({gflops:.0f} GFLOP/s)")
  print(f"{'head' if tied else 'W'} [{k_dim}, {n_dim}]: " + "; ".join(cells), flush=True)

target = model_from_source("smollm2-135m")
spec = TargetSpec(graphdef=target.graphdef)
params = {"plain": target.params, "packed": params_for(target, spec)}


def score_s(name, t):
  cache = init_cache(target.config, 1, 256).with_lengths(jnp.full((1,), 100, jnp.int32))
  start = time.perf_counter()
  logits, _ = score_program(params[name], jnp.ones((1, t), jnp.int32), 100 + jnp.arange(t, dtype=jnp.int32)[None],
                            cache, None, spec=spec)
  jax.block_until_ready(logits)
  return time.perf_counter() - start


times = {}
for t in sorted(set([1] + ROWS)):
  for name in params:
    score_s(name, t), score_s(name, t)
  for i in range(12):
    for name in (("plain", "packed") if i % 2 else ("packed", "plain")):
      times.setdefault((name, t), []).append(score_s(name, t))
for t in sorted(set([1] + ROWS)):
  plain_t, packed_t = np.asarray(times[("plain", t)]), np.asarray(times[("packed", t)])
  print(f"T={t}: plain {1e3 * np.median(plain_t):.1f} ms ({np.median(plain_t) / np.median(times[('plain', 1)]):.2f}x "
        f"its T=1), packed {1e3 * np.median(packed_t):.1f} ms ({np.median(packed_t) / np.median(times[('packed', 1)]):.2f}x "
        f"its T=1); packed / plain {np.median(packed_t / plain_t):.2f}")
