"""`attention(q, k, v, layer, positions, fallback)`: cache attention routed to `cpu_attention.cc` where it pays.

XLA:CPU runs the blockwise attention of a decode step or a K+1 verification as a loop of small einsums and masks
(about 15% of a SmolLM2-135M step at batch 1); the kernel reads each kv head's entries from memory once per run
of queries. Used for float32 queries and caches with up to MAX_QUERIES queries per row, in unsharded CPU programs;
everything else (prefill blocks, GPU/TPU, bf16, sharded meshes) runs `fallback`, the JAX blockwise attention.
"""

import jax
import jax.numpy as jnp

from specjax.kernels import build
from specjax.kernels.linear import kernels_enabled

MAX_QUERIES = 32


def _kernel_call(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, positions_BxT, layer: int):
  out = jax.ShapeDtypeStruct(q_BxTxHxD.shape, jnp.float32)
  return jax.ffi.ffi_call(build.ATTENTION_TARGET_NAME, out)(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD,
                                                            positions_BxT.astype(jnp.int32), layer=layer)


def applies(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, layer) -> bool:
  """Whether `attention` takes the kernel for these operands (at trace time)."""
  n_heads, n_kv = q_BxTxHxD.shape[2], k_LxBxSxKxD.shape[3]
  return (isinstance(layer, int) and q_BxTxHxD.shape[1] <= MAX_QUERIES and n_heads % n_kv == 0
          and all(a.dtype == jnp.float32 for a in (q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD))
          and kernels_enabled())


def attention(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, layer, positions_BxT, fallback):
  """fallback(q, k, v, positions) unless `applies`; on CPU the kernel, elsewhere (e.g. lowered for TPU) fallback."""
  if not applies(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, layer):
    return fallback(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, positions_BxT)
  return jax.lax.platform_dependent(q_BxTxHxD, k_LxBxSxKxD, v_LxBxSxKxD, positions_BxT,
                                    cpu=lambda *a: _kernel_call(*a, layer=layer), default=fallback)
