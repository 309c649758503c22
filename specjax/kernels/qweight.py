"""`QuantizedWeight`: a weight matrix stored as GGUF-style blocks, the one format the quantized kernels, the XLA
path, the model and the GGUF loader share.

The matrix is W [N, K] with N output rows; `x [..., K] @ W.T` is what a layer computes (the NT layout of a tied
embedding used as the head, and GGUF's own layout: each output row's K inputs in blocks of `block` values).

  scheme   q                              scale            minimum          value of input i of row n
  int8     int8 [N, K]                    f16 [N, 1]       empty (0,)       q[n, i] * scale[n, 0]   (block = K)
  q8_0     int8 [N, K]                    f16 [N, K/32]    empty (0,)       q[n, i] * scale[n, i // 32]
  q4_0     uint8 [N, K/2] (GGUF nibbles)  f16 [N, K/32]    empty (0,)       (nib(n, i) - 8) * scale[n, i // 32]
  q4_1     uint8 [N, K/2] (GGUF nibbles)  f16 [N, K/32]    f16 [N, K/32]    nib(n, i) * scale[n, b] + minimum[n, b]

GGUF nibble order within a block of 32: byte j (0 <= j < 16) of the block holds value j in its low nibble and
value j + 16 in its high nibble.
"""

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

SCHEMES = ("int8", "q8_0", "q4_0", "q4_1")
Q_DTYPES = {"int8": jnp.int8, "q8_0": jnp.int8, "q4_0": jnp.uint8, "q4_1": jnp.uint8}  # q's dtype per scheme
BLOCK = 32


@flax.struct.dataclass
class QuantizedWeight:
  q: jax.Array
  scale: jax.Array
  minimum: jax.Array
  scheme: str = flax.struct.field(pytree_node=False, default="int8")

  @property
  def shape(self) -> tuple[int, int]:
    """(N, K) of the matrix it stands for."""
    n, width = self.q.shape
    return n, width * 2 if self.scheme in ("q4_0", "q4_1") else width

  @property
  def block(self) -> int:
    return self.shape[1] // self.scale.shape[1]

  @property
  def nbytes(self) -> int:
    return sum(int(np.prod(a.shape)) * jnp.dtype(a.dtype).itemsize for a in (self.q, self.scale, self.minimum))


def abstract_weight(shape: tuple[int, int], scheme: str) -> QuantizedWeight:
  """The ShapeDtypeStructs of a `scheme` weight W [N, K] (nothing allocated): what AOT compiles and sharded
  restores lay out. K must be a multiple of BLOCK for the block schemes."""
  n, k = shape
  if scheme not in SCHEMES:
    raise ValueError(f"unknown quantization scheme {scheme!r}; use one of {list(SCHEMES)}")
  f16 = jnp.float16
  blocks = (n, 1) if scheme == "int8" else (n, k // BLOCK)
  q = jax.ShapeDtypeStruct((n, k // 2 if scheme in ("q4_0", "q4_1") else k), Q_DTYPES[scheme])
  minimum = jax.ShapeDtypeStruct(blocks if scheme == "q4_1" else (0,), f16)
  return QuantizedWeight(q=q, scale=jax.ShapeDtypeStruct(blocks, f16), minimum=minimum, scheme=scheme)


def dequantize(w: QuantizedWeight, dtype=jnp.float32) -> jax.Array:
  """W [N, K] as floats (jnp; inside or outside jit): the XLA path's weights and the tests' reference."""
  n, k = w.shape
  scale = jnp.repeat(w.scale.astype(jnp.float32), w.block, axis=1)
  if w.scheme in ("int8", "q8_0"):
    return (w.q.astype(jnp.float32) * scale).astype(dtype)
  blocks = w.q.reshape(n, k // BLOCK, BLOCK // 2)
  nibbles = jnp.concatenate([blocks & 0xF, blocks >> 4], axis=2).reshape(n, k).astype(jnp.float32)
  if w.scheme == "q4_0":
    return ((nibbles - 8.0) * scale).astype(dtype)
  return (nibbles * scale + jnp.repeat(w.minimum.astype(jnp.float32), w.block, axis=1)).astype(dtype)
