"""`quantized_dense(x, w)`: x [..., K] @ W.T for a `QuantizedWeight` W [N, K].

CPU kernel (`cpu_quant.cc`): 1..32 float32 rows in a program lowered for CPU, while the kernels are on
(`specjax.kernels.linear.kernels_enabled()`, the switch the fp32 kernel uses): each weight row is read once and
dequantized in registers, so a step streams the quantized bytes only (int8 about 1/4 of fp32's, q4_1 about 1/6).
With 1..4 rows (decoding), the kernel also rounds x to int8 per block of 32 (its own scale) and takes integer dot
products, as llama.cpp does for these blocks (AVX-512 VNNI: 3-4x fewer instructions; AVX2: vpmaddubsw); not exact
in x (about 1/254 of a block's largest value per element); `int8_activations()` says whether it does
(SPECJAX_INT8_ACTIVATIONS=0 turns it off; =avx2 takes the AVX2 path where VNNI is there too). XLA path (everything
else: other platforms, prefill-sized blocks, the kernels off): int8 rows as a dot of their integers times the row
scales, blocks unpacked in the program, then one dot (a 64-position prefill took 1.7x longer through the kernel 32
rows at a time, 3.3x at 256). Quantized weights are frozen: neither path has a gradient with respect to them.
"""

import os


import jax
import jax.numpy as jnp
import numpy as np

from specjax.kernels import build
from specjax.kernels.linear import skinny_rows
from specjax.kernels.qweight import BLOCK, Q_DTYPES, QuantizedWeight, dequantize

_SCHEME_IDS = {"int8": 0, "q8_0": 1, "q4_0": 2, "q4_1": 3}  # cpu_quant.cc's Scheme


def _xla_quantized_dense(x, w: QuantizedWeight):
  """x @ W.T in the program, in x's precision (bfloat16 stays bfloat16: an accelerator's matrix unit takes it) with
  float32 sums: an int8 weight is a dot of its integers and then the row scales; a block scheme is unpacked to
  values, then one dot."""
  dtype = jnp.bfloat16 if x.dtype == jnp.bfloat16 else jnp.float32
  if w.scheme == "int8":
    y = jnp.einsum("...k,nk->...n", x.astype(dtype), w.q.astype(dtype), preferred_element_type=jnp.float32)
    return y * w.scale[:, 0].astype(jnp.float32).reshape((1,) * (y.ndim - 1) + (-1,))
  return jnp.einsum("...k,nk->...n", x.astype(dtype), dequantize(w, dtype), preferred_element_type=jnp.float32)


MAX_INT8_ACTIVATION_ROWS = 4  # cpu_quant.cc's kMaxRegRows: more rows take its float tile path


_INT8_ACTIVATIONS = {"0": 0, "1": 1, "avx2": 2}  # cpu_quant.cc's Activations


def _int8_mode() -> int:
  value = os.environ.get("SPECJAX_INT8_ACTIVATIONS", "1")
  if value not in _INT8_ACTIVATIONS:
    raise ValueError(f"SPECJAX_INT8_ACTIVATIONS must be one of {sorted(_INT8_ACTIVATIONS)}, got {value!r}")
  return _INT8_ACTIVATIONS[value]


def int8_activations() -> bool:
  """Whether the CPU kernel rounds 1..4 rows of x to int8 blocks (not turned off), at trace time; with VNNI or,
  without it (or with SPECJAX_INT8_ACTIVATIONS=avx2), AVX2's byte multiply-adds."""
  return _int8_mode() != 0


def applies(x_NxK, w: QuantizedWeight) -> bool:
  """Whether `quantized_dense` takes the CPU kernel for these operands (at trace time)."""
  if w.scheme not in _SCHEME_IDS or w.q.ndim != 2 or w.scale.ndim != 2:
    return False
  n, k = w.shape
  return (skinny_rows(x_NxK) is not None and x_NxK.shape[-1] == k
          and k % BLOCK == 0 and w.q.dtype == Q_DTYPES[w.scheme]
          and w.scale.shape == (n, 1 if w.scheme == "int8" else k // BLOCK)
          and (w.scheme != "q4_1" or w.minimum.shape == w.scale.shape))


def _kernel_call(x_MxK, q, scale, minimum, scheme: str):
  out = jax.ShapeDtypeStruct((x_MxK.shape[0], q.shape[0]), jnp.float32)
  return jax.ffi.ffi_call(build.QUANT_TARGET_NAME, out)(x_MxK, q, scale, minimum,
                                                        scheme=np.int64(_SCHEME_IDS[scheme]),
                                                        int8_activations=np.int64(_int8_mode()))


def quantized_dense(x_NxK: jax.Array, w: QuantizedWeight) -> jax.Array:
  """float32 [..., N]."""
  if not applies(x_NxK, w):
    return _xla_quantized_dense(x_NxK, w)
  n, k = w.shape
  x_MxK = x_NxK.reshape(skinny_rows(x_NxK), k)
  scale = w.scale.astype(jnp.float16)
  minimum = w.minimum.astype(jnp.float16) if w.scheme == "q4_1" else jnp.zeros((0, 0), jnp.float16)

  def xla(x, q, s, m):
    return _xla_quantized_dense(x, QuantizedWeight(q=q, scale=s, minimum=w.minimum if w.scheme != "q4_1" else m,
                                                   scheme=w.scheme))

  out = jax.lax.platform_dependent(x_MxK, w.q, scale, minimum,
                                   cpu=lambda x, q, s, m: _kernel_call(x, q, s, m, w.scheme), default=xla)
  return out.reshape(x_NxK.shape[:-1] + (n,))


def quantized_rows(w: QuantizedWeight, ids) -> jax.Array:
  """Rows `ids` of W as float32 [..., K] (an embedding lookup in a quantized table)."""
  picked = QuantizedWeight(q=jnp.take(w.q, ids.reshape(-1), axis=0), scale=jnp.take(w.scale, ids.reshape(-1), axis=0),
                           minimum=(jnp.take(w.minimum, ids.reshape(-1), axis=0) if w.minimum.size else w.minimum),
                           scheme=w.scheme)
  return dequantize(picked, jnp.float32).reshape(ids.shape + (w.shape[1],))
