"""The CPU attention kernel behind `cached_attention`: float64 softmax attention for the shapes it takes, token trees
as the JAX blockwise path masks them, and the cases routed away from it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.attention import cached_attention
from specjax.kernels import attention, build, use_kernels
from specjax.trees.layout import tree_layout

pytestmark = pytest.mark.skipif(not build.registered(), reason=f"CPU kernel unavailable: {build.unavailable_reason()}")


def _operands(seed, batch, t_len, n_heads, n_kv, head_dim, size, n_layers=2, scale=1.0):
  keys = jax.random.split(jax.random.key(seed), 3)
  k = jax.random.normal(keys[0], (n_layers, batch, size, n_kv, head_dim)) * scale
  v = jax.random.normal(keys[1], (n_layers, batch, size, n_kv, head_dim))
  q = jax.random.normal(keys[2], (batch, t_len, n_heads, head_dim)) * scale
  return q, k, v


@pytest.mark.parametrize("batch,t_len,n_heads,n_kv,head_dim,size", [
    (1, 1, 9, 3, 64, 256),    # SmolLM2's heads, one decode step
    (1, 5, 9, 3, 64, 256),    # its K + 1 = 5 verification
    (3, 2, 4, 4, 72, 64),     # no grouping; a head dim past the 64-column block
    (2, 32, 8, 2, 12, 48),    # the most queries the kernel takes; a head dim with a tail of 4
    (2, 3, 6, 1, 8, 1024),    # one kv head, a long cache
])
def test_kernel_matches_dense_attention(batch, t_len, n_heads, n_kv, head_dim, size, dense_attention):
  """Positions spread over the cache (key counts with and without a remainder of 8; the last position)."""
  q, k, v = _operands(batch * 31 + t_len, batch, t_len, n_heads, n_kv, head_dim, size)
  starts_B = np.array([size - t_len, 0, 37 % (size - t_len + 1)][:batch])
  positions_BxT = (starts_B[:, None] + np.arange(t_len)[None, :]).astype(np.int32)
  fn = jax.jit(lambda q, k, v, p: cached_attention(q, k, v, 1, p, 16))
  assert attention.applies(q, k, v, 1) and "specjax_cpu_attention" in fn.lower(q, k, v, positions_BxT).as_text()
  got = fn(q, k, v, jnp.asarray(positions_BxT))
  np.testing.assert_allclose(np.asarray(got), dense_attention(q, k[1], v[1], positions_BxT), atol=3e-5, rtol=3e-5)


def test_peaked_and_flat_softmax(dense_attention):
  """Scores spanning hundreds (most weights underflow to zero) and near-equal scores both match."""
  for scale in (8.0, 1e-3):
    q, k, v = _operands(7, 2, 4, 6, 2, 64, 128, scale=scale)
    positions = np.array([[40, 41, 42, 43], [120, 121, 122, 123]], np.int32)
    got = jax.jit(lambda q, k, v, p: cached_attention(q, k, v, 0, p, 32))(q, k, v, jnp.asarray(positions))
    np.testing.assert_allclose(np.asarray(got), dense_attention(q, k[0], v[0], positions), atol=3e-5, rtol=3e-5)


def test_matches_the_blockwise_path_inside_a_model_step():
  """A decode step and a verification of a small Llama give the same logits with and without the kernel."""
  import specjax
  from flax import nnx
  from specjax.cache import init_cache

  config = specjax.ModelConfig(vocab_size=64, d_model=48, n_layers=3, n_heads=6, n_kv_heads=2, ffn_dim=96,
                               max_seq_len=64)
  model = specjax.init_model(config, seed=0)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 64, (2, 20)), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(20, dtype=jnp.int32), (2, 20))

  def logits(kernels):
    def run(params, tokens, positions):
      module = nnx.merge(model.graphdef, params)
      cache = module(tokens[:, :15], positions[:, :15], init_cache(config, 2, 32))[2]
      step = module(tokens[:, 15:16], positions[:, 15:16], cache)[0]
      verify = module(tokens[:, 15:20], positions[:, 15:20], cache)[0]
      return step, verify
    with use_kernels(kernels):
      return jax.jit(run)(model.params, tokens, positions)

  for on, off in zip(logits(True), logits(False)):
    np.testing.assert_allclose(np.asarray(on), np.asarray(off), atol=2e-5, rtol=2e-5)


def test_outside_the_kernel_range_is_the_blockwise_path():
  """More queries than MAX_QUERIES (a prefill), bf16, a traced layer and turned-off kernels do not call it."""
  def lowered(q, k, v, layer=0):
    return jax.jit(lambda q, k, v: cached_attention(q, k, v, layer, jnp.zeros(q.shape[:2], jnp.int32), 8)).lower(
        q, k, v).as_text()

  q, k, v = _operands(0, 1, attention.MAX_QUERIES + 1, 2, 1, 8, 64)
  assert "specjax_cpu_attention" not in lowered(q, k, v)
  q, k, v = _operands(0, 1, 1, 2, 1, 8, 64)
  assert "specjax_cpu_attention" in lowered(q, k, v)
  assert "specjax_cpu_attention" not in lowered(*(a.astype(jnp.bfloat16) for a in (q, k, v)))
  with use_kernels(False):
    assert "specjax_cpu_attention" not in lowered(q, k, v, layer=1)
  traced = jax.jit(lambda q, k, v, layer: cached_attention(q, k, v, layer, jnp.zeros((1, 1), jnp.int32), 8))
  assert "specjax_cpu_attention" not in traced.lower(q, k, v, 1).as_text()


def _random_parents(rng, batch, width, depth, padding):
  """parent_BxN of `depth` levels of `width` nodes (each node's parent a random node of the level above), then
  `padding` nodes whose parent is below -1 (seen as the root's children)."""
  parents = np.full((batch, width * depth + padding), -2, np.int32)
  for level in range(1, depth):
    above = np.arange((level - 1) * width, level * width)
    parents[:, level * width:(level + 1) * width] = rng.choice(above, (batch, width))
  parents[:, :width] = -1
  parents[:, width * depth:] = rng.integers(-5, -1, (batch, padding))
  return parents


@pytest.mark.parametrize("batch,width,depth,padding,n_heads,n_kv,head_dim,size", [
    (1, 1, 1, 0, 9, 3, 64, 256),   # SmolLM2's heads; a one-node tree
    (3, 4, 3, 2, 9, 3, 64, 256),   # the widest, deepest tree, with padding
    (1, 2, 2, 1, 4, 2, 12, 64),    # a head dim with a tail of 4
    (3, 3, 1, 0, 6, 1, 8, 128),    # one kv head, a flat tree
    (3, 1, 3, 3, 4, 4, 72, 64),    # a chain with padding; no grouping, a head dim past the 64-column block
])
def test_tree_kernel_matches_the_blockwise_tree(batch, width, depth, padding, n_heads, n_kv, head_dim, size):
  """The whole tree in one call and one level of it (the other levels' entries already in the cache), with a root
  slot per row (one at slot 0: a query then sees only its ancestors), give the JAX path's output."""
  rng = np.random.default_rng(batch * 100 + width * 10 + depth)
  parents_BxN = _random_parents(rng, batch, width, depth, padding)
  t_tree = parents_BxN.shape[1] + 1
  roots_B = np.array([size - t_tree - 3, 0, 37][:batch], np.int32)
  layout = tree_layout(parents_BxN, roots_B)
  level = depth - 1  # the deepest level: every ancestor sits in an earlier slot
  for first, count in ((0, t_tree), (1 + level * width, width)):
    q, k, v = _operands(batch + width + first, batch, count, n_heads, n_kv, head_dim, size)
    slots_BxT = jnp.asarray(roots_B[:, None] + first + np.arange(count)[None, :], jnp.int32)
    got, want = (_tree_call(kernels, q, k, v, slots_BxT, layout) for kernels in (True, False))
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5, err_msg=f"slots {first}..{first + count - 1}")


def _tree_call(kernels, q, k, v, slots_BxT, layout):
  """Layer 1's tree attention on one path, checking which one was lowered."""
  fn = jax.jit(lambda q, k, v, p, tree: cached_attention(q, k, v, 1, p, 16, tree))
  with use_kernels(kernels):
    lowered = fn.lower(q, k, v, slots_BxT, layout).as_text()
    assert ("specjax_cpu_tree_attention" in lowered) == kernels and "specjax_cpu_attention" not in lowered
    return np.asarray(fn(q, k, v, slots_BxT, layout))


def test_a_tree_model_call_matches_the_blockwise_path():
  """A tiny Llama's hidden states over a token tree (whole, then a run of two of its slots) are the same with and
  without kernels, rows with their own root slots."""
  import specjax
  from flax import nnx
  from specjax.cache import init_cache

  config = specjax.ModelConfig(vocab_size=64, d_model=48, n_layers=3, n_heads=6, n_kv_heads=2, ffn_dim=96,
                               max_seq_len=64)
  model = specjax.init_model(config, seed=0)
  rng = np.random.default_rng(1)
  prefix = jnp.asarray(rng.integers(0, 64, (2, 15)), jnp.int32)
  parents_BxN = np.array([[-1, -1, 0, 0, 1, -3], [-1, 0, 0, 1, 2, -2]], np.int32)
  tree_tokens = jnp.asarray(rng.integers(0, 64, (2, 7)), jnp.int32)
  roots_B = np.array([9, 14], np.int32)
  slots = jnp.asarray(roots_B[:, None] + np.arange(7)[None, :], jnp.int32)

  def run(params, prefix, tree_tokens, slots, layout):
    module = nnx.merge(model.graphdef, params)
    positions = jnp.broadcast_to(jnp.arange(15, dtype=jnp.int32), prefix.shape)
    cache = module(prefix, positions, init_cache(config, 2, 32))[2]
    whole, cache, _ = module.hidden_states(tree_tokens, slots, cache, tree=layout)
    level, _, _ = module.hidden_states(tree_tokens[:, 3:5], slots[:, 3:5], cache, tree=layout)
    return whole, level

  args = (model.params, prefix, tree_tokens, slots, tree_layout(parents_BxN, roots_B))
  results = []
  for kernels in (True, False):
    with use_kernels(kernels):
      program = jax.jit(lambda *a: run(*a))  # a fresh function per path: the switch is read at trace time
      assert ("specjax_cpu_tree_attention" in program.lower(*args).as_text()) == kernels
      results.append(program(*args))
  for on, off in zip(*results):
    np.testing.assert_allclose(np.asarray(on), np.asarray(off), atol=2e-5, rtol=2e-5)
