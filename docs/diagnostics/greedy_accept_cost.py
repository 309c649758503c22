"""Greedy acceptance over SmolLM2's 49,152-token vocabulary, jitted, 300 alternated pairs: through the one-hot p
(`accept(greedy=True)` on `distribution`, the path before docs/results.md section 47) against the target's argmax
ids (`accept_greedy`, what the engine runs now), for a chain of K=4 and a balanced tree of 16; outputs checked equal.

  python docs/diagnostics/greedy_accept_cost.py
"""
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.sampling import SamplingParams, distribution, greedy_tokens
from specjax.rejection import accept, accept_greedy
from specjax.trees.rejection import accept_tree, accept_tree_greedy
from specjax.trees import StaticTree
g = SamplingParams(temperature=0.0)
V = 49152
def chain_old(logits, q, d, keys): return accept(distribution(logits, g), q, d, keys, greedy=True)
def chain_new(logits, q, d, keys): return accept_greedy(greedy_tokens(logits), d)
tree = StaticTree.balanced(16, 4)
par = jnp.asarray([tree.parents], jnp.int32)
def tree_old(logits, q, t, keys):
  return accept_tree(distribution(logits, g), q, t, par, keys, branching="top_k", greedy=True)
def tree_new(logits, q, t, keys): return accept_tree_greedy(greedy_tokens(logits), t, par)
rng = np.random.default_rng(0)
keys = jax.random.split(jax.random.key(0), 1)
for name, old, new, n in (("chain K=4", chain_old, chain_new, 4), ("tree N=16", tree_old, tree_new, 16)):
  logits = jnp.asarray(rng.standard_normal((1, n + 1, V)), jnp.float32)
  d = jnp.asarray(rng.integers(0, V, (1, n)), jnp.int32)
  q = jax.nn.one_hot(d, V, dtype=jnp.float32)
  if n == 16: q = jnp.concatenate([q, q[:, :1]], 1)
  fo, fn = jax.jit(old), jax.jit(new)
  assert all(np.array_equal(a, b) for a, b in zip(fo(logits, q, d, keys), fn(logits, q, d, keys)))
  to, tn = [], []
  for _ in range(300):
    t0 = time.perf_counter(); jax.block_until_ready(fo(logits, q, d, keys)); t1 = time.perf_counter()
    jax.block_until_ready(fn(logits, q, d, keys)); t2 = time.perf_counter()
    to.append(t1 - t0); tn.append(t2 - t1)
  print(f"{name}: old {1e3*np.median(to):.3f} ms, new {1e3*np.median(tn):.3f} ms")
