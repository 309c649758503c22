"""An independent check of the verification cost (issue 19, docs/results.md section 32): numpy's BLAS (OpenBLAS in
the wheels) on SmolLM2-135M's matmuls (30 layers of qkv, o, gate+up and down, then the tied head), M rows against
one row, the weights distinct per layer as in a forward pass; one-row and M-row passes alternated, ratio medians.

  OPENBLAS_NUM_THREADS=2 python docs/diagnostics/blas_verify_cost.py
"""
import time

import numpy as np

K, F, V, LAYERS = 576, 1536, 49152, 30   # SmolLM2-135M: d_model, ffn_dim, vocabulary, layers
rng = np.random.default_rng(0)
layers = [[rng.standard_normal(shape, dtype=np.float32) for shape in ((K, 960), (K, K), (K, 2 * F), (F, K))]
          for _ in range(LAYERS)]
head = rng.standard_normal((K, V), dtype=np.float32)


def forward_s(m):
  """Seconds for one pass of M rows through every product (qkv, o, gate+up, down per layer; the head)."""
  x = rng.standard_normal((m, K), dtype=np.float32)
  start = time.perf_counter()
  for qkv, o, gate_up, down in layers:
    x @ qkv, x @ o
    (x @ gate_up)[:, :F] @ down
  x @ head
  return time.perf_counter() - start


def flops(m):
  return 2 * m * (LAYERS * (K * 960 + K * K + K * 2 * F + F * K) + K * V)


ROWS = (5, 17, 33)
for m in (1,) + ROWS:
  forward_s(m)
ratios, ones = {m: [] for m in ROWS}, []
for _ in range(15):
  for m in ROWS:
    one, many = forward_s(1), forward_s(m)
    ones.append(one)
    ratios[m].append(many / one)
one_s = float(np.median(ones))
print(f"numpy BLAS, one row: {1e3 * one_s:.1f} ms ({flops(1) / one_s / 1e9:.0f} GFLOP/s)")
for m in ROWS:
  ratio = float(np.median(ratios[m]))
  print(f"M={m}: {ratio:.2f}x one row ({flops(m) / (ratio * one_s) / 1e9:.0f} GFLOP/s)")
