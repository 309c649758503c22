"""The CPU attention kernel behind `cached_attention`: float64 softmax attention for the shapes it takes, and the
cases routed away from it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.attention import cached_attention
from specjax.kernels import attention, build, use_kernels

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
