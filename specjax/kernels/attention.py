"""`attention(q, k, v, layer, positions, fallback, tree)`: cache attention routed to `cpu_attention.cc` where it pays.

XLA:CPU runs the blockwise attention of a decode step or a K+1 verification as a loop of small einsums and masks
(about 15% of a SmolLM2-135M step at batch 1); the kernel reads each kv head's entries from memory once per run
of queries. Used for float32 queries and caches with up to MAX_QUERIES queries per row (a token tree's call: up to
MAX_TREE_QUERIES), in unsharded CPU programs; everything else (prefill blocks, GPU/TPU, bf16, sharded meshes) runs
`fallback`, the JAX blockwise attention.
"""

import jax
import jax.numpy as jnp

from specjax.kernels import build
from specjax.kernels.linear import kernels_enabled

MAX_QUERIES = 32
# A token tree's call (root + up to specjax.trees.dynamic.MAX_NODES nodes) takes the kernel up to this many queries.
MAX_TREE_QUERIES = 65


def _kernel_call(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, positions_BxT, layer: int):
  out = jax.ShapeDtypeStruct(q_BxTxHxD.shape, jnp.float32)
  return jax.ffi.ffi_call(build.ATTENTION_TARGET_NAME, out)(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD,
                                                            positions_BxT.astype(jnp.int32), layer=layer)


def _tree_kernel_call(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, slots_BxT, tree, layer: int):
  """The kernel given each query's row of the tree's ancestors (uint8 [B, T, N]) and the root slots [B]."""
  rows_BxT = slots_BxT - tree.root_slot_B[:, None]
  ancestors_BxTxN = jnp.take_along_axis(tree.ancestors_BxTxT, rows_BxT[:, :, None], axis=1).astype(jnp.uint8)
  out = jax.ShapeDtypeStruct(q_BxTxHxD.shape, jnp.float32)
  return jax.ffi.ffi_call(build.TREE_ATTENTION_TARGET_NAME, out)(
      q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, slots_BxT.astype(jnp.int32), ancestors_BxTxN,
      tree.root_slot_B.astype(jnp.int32), layer=layer)


def applies(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, layer, tree=None) -> bool:
  """Whether `attention` takes the kernel for these operands (at trace time); a tree (a `TreeLayout`) whose ancestor
  matrix has one row per batch row takes it where its chain would."""
  n_heads, n_kv = q_BxTxHxD.shape[2], k_LxBxSxKxD.shape[3]
  tree_fits = tree is None or (tree.ancestors_BxTxT.ndim == 3 and tree.ancestors_BxTxT.shape[0] == q_BxTxHxD.shape[0])
  limit = MAX_QUERIES if tree is None else MAX_TREE_QUERIES
  return (isinstance(layer, int) and q_BxTxHxD.shape[1] <= limit and n_heads % n_kv == 0 and tree_fits
          and all(a.dtype == jnp.float32 for a in (q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD))
          and kernels_enabled())


def attention(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, layer, positions_BxT, fallback, tree=None):
  """fallback(q, k, v, positions) unless `applies`; on CPU the kernel, elsewhere (e.g. lowered for TPU) fallback.
  With `tree` the positions are the queries' cache slots and the kernel masks by `tree_visibility`'s rule."""
  if not applies(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, layer, tree):
    return fallback(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, positions_BxT)
  if tree is None:
    return jax.lax.platform_dependent(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, positions_BxT,
                                      cpu=lambda *a: _kernel_call(*a, layer=layer), default=fallback)
  return jax.lax.platform_dependent(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, positions_BxT, tree,
                                    cpu=lambda *a: _tree_kernel_call(*a, layer=layer),
                                    default=lambda q, k, v, p, _: fallback(q, k, v, p))
