"""Tree attention, CPU kernel vs the JAX blockwise path: one SmolLM2-135M-shaped layer (9 query / 3 kv heads, head
dim 64), a 17-token tree (root + 4 levels of 4) at slot 300 of a 512-slot cache, batch 1. Each timing is a
fori_loop of 50 calls; kernel and JAX runs alternate, and the median of the paired ratios is printed.

  python docs/diagnostics/tree_attention_kernel.py
"""
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax
import jax.numpy as jnp
import numpy as np

from specjax.attention import cached_attention
from specjax.cache import attention_block
from specjax.kernels import build, use_kernels
from specjax.trees.layout import tree_layout

assert build.registered(), build.unavailable_reason()
size, root, reps = 512, 300, 50
parents = np.array([[-1] * 4 + [4 * (i // 4 - 1) + i % 4 // 2 for i in range(4, 16)]], np.int32)  # two per node
layout = tree_layout(parents, np.array([root], np.int32))
keys = jax.random.split(jax.random.key(0), 3)
k = jax.random.normal(keys[0], (1, 1, size, 3, 64))
v = jax.random.normal(keys[1], (1, 1, size, 3, 64))
q = jax.random.normal(keys[2], (1, 17, 9, 64))
slots = jnp.asarray(root + np.arange(17)[None, :], jnp.int32)
block = attention_block(size, 17)


def program(kernels: bool):
  def loop(q, k, v, slots, tree):
    step = lambda i, q: q + 1e-6 * cached_attention(q, k, v, 0, slots, block, tree)
    return jax.lax.fori_loop(0, reps, step, q)
  with use_kernels(kernels):
    compiled = jax.jit(loop).lower(q, k, v, slots, layout).compile()
  assert ("specjax_cpu_tree_attention" in compiled.as_text()) == kernels
  return lambda: jax.block_until_ready(compiled(q, k, v, slots, layout))


def per_call(run) -> float:
  start = time.perf_counter()
  run()
  return (time.perf_counter() - start) / reps


kernel, blockwise = program(True), program(False)
kernel(), blockwise()
pairs = [(per_call(kernel), per_call(blockwise)) for _ in range(15)]
k_us, j_us = (np.median([p[i] for p in pairs]) * 1e6 for i in (0, 1))
ratio = np.median([j / kk for kk, j in pairs])
print(f"kernel {k_us:.1f} us/call, JAX blockwise {j_us:.1f} us/call, JAX / kernel {ratio:.2f}x (median of pairs)")
