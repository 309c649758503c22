"""Grouped-query attention over a KV cache, walked block by block up to the filled length.

The loop over cache blocks has a data-dependent trip count, so a decode step costs O(filled length),
not O(cache size). Online softmax (running max and sum) keeps it exact; fully masked blocks change nothing.
"""

import functools

import jax
import jax.numpy as jnp

from specjax.kernels import attention as attention_kernel
from specjax.trees.layout import tree_visibility

_MASKED = -1e30


def _layer_block(cache_LxBxSxKxD: jax.Array, layer: int, start, block: int) -> jax.Array:
  """Positions start..start+block of one layer, [B, block, K, D] in float32."""
  _, batch, _, n_kv, head_dim = cache_LxBxSxKxD.shape
  sliced = jax.lax.dynamic_slice(cache_LxBxSxKxD, (layer, 0, start, 0, 0), (1, batch, block, n_kv, head_dim))
  return sliced[0].astype(jnp.float32)


def cached_attention(q_BxTxHxD: jax.Array, k_LxBxSxKxD: jax.Array, v_LxBxSxKxD: jax.Array, layer: int,
                     q_positions_BxT: jax.Array, block: int, tree=None) -> jax.Array:
  """Causal attention of T queries at absolute positions against layer `layer`'s cache entries 0..position.

  With `tree` (a `specjax.trees.layout.TreeLayout`; the T queries are a token tree in consecutive slots) a query
  sees the slots before the tree's root and its own ancestors' slots instead.

  Takes every layer's cache and reads the blocks of one layer straight from it: slicing the layer out first
  would copy it whole (O(cache size) per layer and step, at every batch size). Every cache entry at or below a
  query's position must already hold that row's key/value. Returns [B, T, H, D] in the query dtype. Unsharded
  float32 CPU programs with few queries run the same computation in `specjax/kernels/cpu_attention.cc`.
  """
  n_layers, size = k_LxBxSxKxD.shape[0], k_LxBxSxKxD.shape[2]
  if size % block:
    raise ValueError(f"attention block {block} does not divide the cache size {size}")
  if isinstance(layer, int) and not 0 <= layer < n_layers:
    raise ValueError(f"layer {layer} outside the cache's {n_layers} layers")
  blockwise = functools.partial(_blockwise_attention, layer=layer, block=block, tree=tree)
  return attention_kernel.attention(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, layer, q_positions_BxT, blockwise, tree)


def _blockwise_attention(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, q_positions_BxT, *, layer, block: int, tree=None):
  """Online softmax over the cache blocks up to the last query's block (XLA ops; any platform and sharding)."""
  batch, t_len, n_heads, head_dim = q_BxTxHxD.shape
  size, n_kv = k_LxBxSxKxD.shape[2], k_LxBxSxKxD.shape[3]
  groups = n_heads // n_kv
  q_BxTxKxGxD = (q_BxTxHxD.astype(jnp.float32) * head_dim**-0.5).reshape(batch, t_len, n_kv, groups, head_dim)
  n_blocks = jnp.minimum(jnp.max(q_positions_BxT) // block + 1, size // block)

  def body(i, carry):
    max_BxKxGxT, sum_BxKxGxT, acc_BxKxGxTxD = carry
    start = i * block
    k_blk = _layer_block(k_LxBxSxKxD, layer, start, block)
    v_blk = _layer_block(v_LxBxSxKxD, layer, start, block)
    scores = jnp.einsum("btkgd,bskd->bkgts", q_BxTxKxGxD, k_blk)
    key_pos_S = start + jnp.arange(block)
    if tree is None:
      visible_BxTxS = key_pos_S[None, None, :] <= q_positions_BxT[:, :, None]
    else:
      visible_BxTxS = tree_visibility(key_pos_S, q_positions_BxT, tree)
    visible = visible_BxTxS[:, None, None]
    scores = jnp.where(visible, scores, _MASKED)
    new_max = jnp.maximum(max_BxKxGxT, scores.max(-1))
    weights = jnp.where(visible, jnp.exp(scores - new_max[..., None]), 0.0)
    correction = jnp.exp(max_BxKxGxT - new_max)
    new_sum = sum_BxKxGxT * correction + weights.sum(-1)
    new_acc = acc_BxKxGxTxD * correction[..., None] + jnp.einsum("bkgts,bskd->bkgtd", weights, v_blk)
    return new_max, new_sum, new_acc

  init = (
      jnp.full((batch, n_kv, groups, t_len), _MASKED, jnp.float32),
      jnp.zeros((batch, n_kv, groups, t_len), jnp.float32),
      jnp.zeros((batch, n_kv, groups, t_len, head_dim), jnp.float32),
  )
  _, total, acc = jax.lax.fori_loop(0, n_blocks, body, init)
  out_BxKxGxTxD = acc / total[..., None]
  out = out_BxKxGxTxD.transpose(0, 3, 1, 2, 4).reshape(batch, t_len, n_heads, head_dim)
  return out.astype(q_BxTxHxD.dtype)
