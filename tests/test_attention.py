"""cached_attention against dense causal softmax attention, reading one layer of a multi-layer cache."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.attention import cached_attention


def dense_reference(q_BxTxHxD, k_BxSxKxD, v_BxSxKxD, positions_BxT):
  """Plain float64 softmax attention of each query over cache positions <= its own."""
  q, k, v = (np.asarray(a, np.float64) for a in (q_BxTxHxD, k_BxSxKxD, v_BxSxKxD))
  batch, t_len, n_heads, head_dim = q.shape
  groups = n_heads // k.shape[2]
  out = np.zeros_like(q)
  for b in range(batch):
    for t in range(t_len):
      visible = positions_BxT[b, t] + 1
      for h in range(n_heads):
        scores = k[b, :visible, h // groups] @ q[b, t, h] / np.sqrt(head_dim)
        weights = np.exp(scores - scores.max())
        out[b, t, h] = weights @ v[b, :visible, h // groups] / weights.sum()
  return out


@pytest.mark.parametrize("batch,t_len,block", [(1, 1, 16), (3, 1, 8), (2, 5, 16), (2, 16, 8)])
def test_matches_dense_attention_on_the_chosen_layer(batch, t_len, block):
  n_layers, size, n_kv, groups, head_dim = 3, 32, 2, 3, 8
  keys = jax.random.split(jax.random.key(batch * 100 + t_len), 3)
  k_LxBxSxKxD = jax.random.normal(keys[0], (n_layers, batch, size, n_kv, head_dim))
  v_LxBxSxKxD = jax.random.normal(keys[1], (n_layers, batch, size, n_kv, head_dim))
  q_BxTxHxD = jax.random.normal(keys[2], (batch, t_len, n_kv * groups, head_dim))
  starts_B = np.array([0, 11, 25][:batch]) if t_len > 1 else np.array([0, 9, 31][:batch])
  starts_B = np.minimum(starts_B, size - t_len)
  positions_BxT = (starts_B[:, None] + np.arange(t_len)[None, :]).astype(np.int32)
  for layer in range(n_layers):
    got = cached_attention(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, layer, jnp.asarray(positions_BxT), block)
    want = dense_reference(q_BxTxHxD, k_LxBxSxKxD[layer], v_LxBxSxKxD[layer], positions_BxT)
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-5, rtol=2e-5)


def test_entries_past_a_query_do_not_matter():
  """Garbage beyond every query's position (rolled-back drafts, other rows' longer prefixes) changes nothing."""
  k = jax.random.normal(jax.random.key(0), (1, 2, 16, 1, 4))
  v = jax.random.normal(jax.random.key(1), (1, 2, 16, 1, 4))
  q = jax.random.normal(jax.random.key(2), (2, 1, 2, 4))
  positions = jnp.array([[3], [7]], jnp.int32)
  noisy_k = k.at[0, 0, 4:].set(1e4).at[0, 1, 8:].set(-1e4)
  noisy_v = v.at[0, 0, 4:].set(3e4).at[0, 1, 8:].set(-3e4)
  np.testing.assert_array_equal(np.asarray(cached_attention(q, k, v, 0, positions, 4)),
                                np.asarray(cached_attention(q, noisy_k, noisy_v, 0, positions, 4)))


def test_block_must_divide_the_cache():
  k = jnp.zeros((1, 1, 12, 1, 4))
  with pytest.raises(ValueError, match="does not divide"):
    cached_attention(jnp.zeros((1, 1, 1, 4)), k, k, 0, jnp.zeros((1, 1), jnp.int32), 8)
