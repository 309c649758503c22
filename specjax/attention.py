"""Grouped-query attention over a KV cache, walked block by block up to the filled length.

The loop over cache blocks has a data-dependent trip count, so a decode step costs O(filled length),
not O(cache size). Online softmax (running max and sum) keeps it exact; fully masked blocks change nothing.
"""

import functools

import jax
import jax.numpy as jnp

from specjax.cache import accelerator_attention_block
from specjax.kernels import attention as attention_kernel
from specjax.trees.layout import tree_visibility

_MASKED = -1e30


def _layer_block(cache_LxBxSxKxD: jax.Array, layer: int, start, block: int) -> jax.Array:
  """Positions start..start+block of one layer, [B, block, K, D] in float32."""
  _, batch, _, n_kv, head_dim = cache_LxBxSxKxD.shape
  sliced = jax.lax.dynamic_slice(cache_LxBxSxKxD, (layer, 0, start, 0, 0), (1, batch, block, n_kv, head_dim))
  return sliced[0].astype(jnp.float32)


class Bidirectional:
  """Passed where a `TreeLayout` goes (`tree=`): the T queries, in consecutive cache slots, see one another both
  ways and every entry before them (a block drafter's block); their RoPE positions are their slots."""

  @staticmethod
  def rope_positions(slots_BxT):
    return slots_BxT


def cached_attention(q_BxTxHxD: jax.Array, k_LxBxSxKxD: jax.Array, v_LxBxSxKxD: jax.Array, layer: int,
                     q_positions_BxT: jax.Array, block: int, tree=None) -> jax.Array:
  """Causal attention of T queries at absolute positions against layer `layer`'s cache entries 0..position.

  With `tree` (a `specjax.trees.layout.TreeLayout`; the T queries are a token tree in consecutive slots) a query
  sees the slots before the tree's root and its own ancestors' slots instead; with `Bidirectional()` every query
  sees the entries up to the last query's position.

  Takes every layer's cache and reads the blocks of one layer straight from it: slicing the layer out first
  would copy it whole (O(cache size) per layer and step, at every batch size). Every cache entry at or below a
  query's position must already hold that row's key/value. Returns [B, T, H, D] in the query dtype. Unsharded
  float32 CPU programs with few queries run the same computation in `specjax/kernels/cpu_attention.cc`. `block` is
  the CPU's block size; on GPUs and TPUs, where each block costs a loop iteration, `accelerator_attention_block`'s.
  """
  if isinstance(tree, Bidirectional):
    q_positions_BxT, tree = jnp.broadcast_to(q_positions_BxT[:, -1:], q_positions_BxT.shape), None
  n_layers, size = k_LxBxSxKxD.shape[0], k_LxBxSxKxD.shape[2]
  if size % block:
    raise ValueError(f"attention block {block} does not divide the cache size {size}")
  if isinstance(layer, int) and not 0 <= layer < n_layers:
    raise ValueError(f"layer {layer} outside the cache's {n_layers} layers")
  on_cpu = functools.partial(_blockwise_attention, layer=layer, block=block, tree=tree)
  query_rows = q_BxTxHxD.shape[1] * (q_BxTxHxD.shape[2] // k_LxBxSxKxD.shape[3])
  wide = functools.partial(_blockwise_attention, layer=layer, block=accelerator_attention_block(size, query_rows),
                           tree=tree)
  blockwise = lambda *operands: jax.lax.platform_dependent(*operands, cpu=on_cpu, default=wide)
  return attention_kernel.attention(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, layer, q_positions_BxT, blockwise, tree)


def _blockwise_attention(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, q_positions_BxT, *, layer, block: int, tree=None):
  """Online softmax over the cache blocks up to the last query's block (XLA ops; any platform and sharding). The
  queries of a kv head's group are one matrix [G * T, D] (m = g * T + t), so each block is two matmuls per kv head
  (a 128-query prefill chunk: 1.5-1.7x faster on XLA:CPU than an einsum over separate group and query axes)."""
  batch, t_len, n_heads, head_dim = q_BxTxHxD.shape
  size, n_kv = k_LxBxSxKxD.shape[2], k_LxBxSxKxD.shape[3]
  groups = n_heads // n_kv
  rows = groups * t_len
  q_BxKxMxD = (q_BxTxHxD.astype(jnp.float32) * head_dim**-0.5).reshape(batch, t_len, n_kv, groups, head_dim)
  q_BxKxMxD = q_BxKxMxD.transpose(0, 2, 3, 1, 4).reshape(batch, n_kv, rows, head_dim)
  n_blocks = jnp.minimum(jnp.max(q_positions_BxT) // block + 1, size // block)

  def body(i, carry):
    max_BxKxM, sum_BxKxM, acc_BxKxMxD = carry
    start = i * block
    k_BxKxSxD = _layer_block(k_LxBxSxKxD, layer, start, block).transpose(0, 2, 1, 3)
    v_BxKxSxD = _layer_block(v_LxBxSxKxD, layer, start, block).transpose(0, 2, 1, 3)
    scores = jnp.einsum("bkmd,bksd->bkms", q_BxKxMxD, k_BxKxSxD)
    key_pos_S = start + jnp.arange(block)
    if tree is None:
      visible_BxTxS = key_pos_S[None, None, :] <= q_positions_BxT[:, :, None]
    else:
      visible_BxTxS = tree_visibility(key_pos_S, q_positions_BxT, tree)
    visible = jnp.tile(visible_BxTxS, (1, groups, 1))[:, None]
    scores = jnp.where(visible, scores, _MASKED)
    new_max = jnp.maximum(max_BxKxM, scores.max(-1))
    weights = jnp.where(visible, jnp.exp(scores - new_max[..., None]), 0.0)
    correction = jnp.exp(max_BxKxM - new_max)
    new_sum = sum_BxKxM * correction + weights.sum(-1)
    new_acc = acc_BxKxMxD * correction[..., None] + jnp.einsum("bkms,bksd->bkmd", weights, v_BxKxSxD)
    return new_max, new_sum, new_acc

  init = (
      jnp.full((batch, n_kv, rows), _MASKED, jnp.float32),
      jnp.zeros((batch, n_kv, rows), jnp.float32),
      jnp.zeros((batch, n_kv, rows, head_dim), jnp.float32),
  )
  if size == block:   # one block: no loop (on a GPU each iteration would cost a sync)
    _, total, acc = body(0, init)
  else:
    _, total, acc = jax.lax.fori_loop(0, n_blocks, body, init)
  out_BxKxGxTxD = (acc / total[..., None]).reshape(batch, n_kv, groups, t_len, head_dim)
  out = out_BxKxGxTxD.transpose(0, 3, 1, 2, 4).reshape(batch, t_len, n_heads, head_dim)
  return out.astype(q_BxTxHxD.dtype)
