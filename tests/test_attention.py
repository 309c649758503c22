"""cached_attention against dense causal softmax attention, reading one layer of a multi-layer cache, on both of
its paths: the JAX blockwise loop and (where built) the CPU kernel."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.attention import _blockwise_attention, cached_attention
from specjax.cache import ACCELERATOR_SCORES, accelerator_attention_block
from specjax.kernels import build, use_kernels

PATHS = [False, pytest.param(True, marks=pytest.mark.skipif(not build.registered(), reason="CPU kernel unavailable"))]


@pytest.mark.parametrize("kernels", PATHS)
@pytest.mark.parametrize("batch,t_len,block", [(1, 1, 16), (3, 1, 8), (2, 5, 16), (2, 16, 8)])
def test_matches_dense_attention_on_the_chosen_layer(batch, t_len, block, kernels, dense_attention):
  n_layers, size, n_kv, groups, head_dim = 3, 32, 2, 3, 8
  keys = jax.random.split(jax.random.key(batch * 100 + t_len), 3)
  k_LxBxSxKxD = jax.random.normal(keys[0], (n_layers, batch, size, n_kv, head_dim))
  v_LxBxSxKxD = jax.random.normal(keys[1], (n_layers, batch, size, n_kv, head_dim))
  q_BxTxHxD = jax.random.normal(keys[2], (batch, t_len, n_kv * groups, head_dim))
  starts_B = np.array([0, 11, 25][:batch]) if t_len > 1 else np.array([0, 9, 31][:batch])
  starts_B = np.minimum(starts_B, size - t_len)
  positions_BxT = (starts_B[:, None] + np.arange(t_len)[None, :]).astype(np.int32)
  # A fresh function per path: jit caches traces by function, and the kernel switch is read at trace time.
  attend = jax.jit(lambda *args: cached_attention(*args), static_argnums=(3, 5))
  with use_kernels(kernels):
    assert ("specjax_cpu_attention" in attend.lower(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, 0, positions_BxT,
                                                    block).as_text()) == kernels
    for layer in range(n_layers):
      got = attend(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, layer, jnp.asarray(positions_BxT), block)
      want = dense_attention(q_BxTxHxD, k_LxBxSxKxD[layer], v_LxBxSxKxD[layer], positions_BxT)
      np.testing.assert_allclose(np.asarray(got), want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("kernels", PATHS)
def test_entries_past_a_query_do_not_matter(kernels):
  """Garbage beyond every query's position (rolled-back drafts, other rows' longer prefixes) changes nothing."""
  k = jax.random.normal(jax.random.key(0), (1, 2, 16, 1, 4))
  v = jax.random.normal(jax.random.key(1), (1, 2, 16, 1, 4))
  q = jax.random.normal(jax.random.key(2), (2, 1, 2, 4))
  positions = jnp.array([[3], [7]], jnp.int32)
  noisy_k = k.at[0, 0, 4:].set(1e4).at[0, 1, 8:].set(-1e4)
  noisy_v = v.at[0, 0, 4:].set(3e4).at[0, 1, 8:].set(-3e4)
  with use_kernels(kernels):
    np.testing.assert_array_equal(np.asarray(cached_attention(q, k, v, 0, positions, 4)),
                                  np.asarray(cached_attention(q, noisy_k, noisy_v, 0, positions, 4)))


def test_block_must_divide_the_cache():
  k = jnp.zeros((1, 1, 12, 1, 4))
  with pytest.raises(ValueError, match="does not divide"):
    cached_attention(jnp.zeros((1, 1, 1, 4)), k, k, 0, jnp.zeros((1, 1), jnp.int32), 8)


def test_layer_must_be_in_the_cache():
  k = jnp.zeros((2, 1, 8, 1, 4))
  with pytest.raises(ValueError, match="layer 2"):
    cached_attention(jnp.zeros((1, 1, 1, 4)), k, k, 2, jnp.zeros((1, 1), jnp.int32), 8)


@pytest.mark.parametrize("size,query_rows,want", [(4096, 4, 4096), (4224, 260, 4224), (4096, 8192, 256),
                                                  (4224, 8192, 192), (16, 1, 16)])
def test_accelerator_blocks_are_few_and_divide_the_cache(size, query_rows, want):
  block = accelerator_attention_block(size, query_rows)
  assert block == want and size % block == 0
  assert query_rows * block <= ACCELERATOR_SCORES or block == size


@pytest.mark.parametrize("t_len", [1, 5])
def test_one_block_over_the_whole_cache_matches_dense_attention(t_len, dense_attention):
  """The accelerators' path (no loop: the cache in one block) on every layer, rows at different fills."""
  keys = jax.random.split(jax.random.key(t_len), 3)
  k_LxBxSxKxD = jax.random.normal(keys[0], (2, 2, 32, 2, 8))
  v_LxBxSxKxD = jax.random.normal(keys[1], (2, 2, 32, 2, 8))
  q_BxTxHxD = jax.random.normal(keys[2], (2, t_len, 6, 8))
  positions_BxT = (np.array([3, 20])[:, None] + np.arange(t_len)[None, :]).astype(np.int32)
  for layer in range(2):
    got = _blockwise_attention(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, jnp.asarray(positions_BxT), layer=layer,
                               block=32)
    want = dense_attention(q_BxTxHxD, k_LxBxSxKxD[layer], v_LxBxSxKxD[layer], positions_BxT)
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-5, rtol=2e-5)


def test_accelerators_run_a_verification_without_a_loop():
  """Lowered for TPU, a 5-query call over a 4096-position cache has no while loop; for the CPU (kernels off) it
  walks 128-position blocks."""
  k = jnp.zeros((2, 1, 4096, 2, 8), jnp.bfloat16)
  q, positions = jnp.zeros((1, 5, 6, 8), jnp.bfloat16), jnp.arange(5, dtype=jnp.int32)[None] + 2000
  attend = jax.jit(lambda q, k, v, p: cached_attention(q, k, v, 1, p, 128))
  with use_kernels(False):
    traced = attend.trace(q, k, k, positions)
    assert "stablehlo.while" in traced.lower(lowering_platforms=("cpu",)).as_text()
    assert "stablehlo.while" not in traced.lower(lowering_platforms=("tpu",)).as_text()
