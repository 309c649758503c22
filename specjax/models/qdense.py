"""`QDense`: a linear (or the embedding table) holding a `QuantizedWeight` W [N, K], for any family's decoder.

Parameters `q`, `scale`, `minimum` (q4_1 only) and an optional float `bias`; `scheme` is static (in the graphdef).
As a linear, `qdense(x)` is x @ W.T (+ bias) through `specjax.kernels.quantized.quantized_dense`; as the embedding,
`rows(ids)` looks rows up through `quantized_rows` and a call is the tied head. `specjax/quantize.py` builds them.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.kernels.qweight import QuantizedWeight
from specjax.kernels.quantized import quantized_dense, quantized_rows


class QDense(nnx.Module):

  def __init__(self, w: QuantizedWeight, bias: nnx.Param | None = None):
    self.scheme = w.scheme
    self.q = nnx.Param(w.q)
    self.scale = nnx.Param(w.scale)
    self.minimum = nnx.Param(w.minimum) if w.scheme == "q4_1" else None
    self.bias = bias

  @staticmethod
  def fields(scheme: str) -> tuple[str, ...]:
    """The parameter names that hold a `scheme` weight."""
    return ("q", "scale", "minimum") if scheme == "q4_1" else ("q", "scale")

  @property
  def weight(self) -> QuantizedWeight:
    minimum = self.minimum[...] if self.minimum is not None else jnp.zeros((0,), jnp.float16)
    return QuantizedWeight(q=self.q[...], scale=self.scale[...], minimum=minimum, scheme=self.scheme)

  def __call__(self, x: jax.Array) -> jax.Array:
    y = quantized_dense(x, self.weight)
    if self.bias is not None:
      y = y + self.bias[...].astype(y.dtype).reshape((1,) * (y.ndim - 1) + (-1,))
    return y.astype(x.dtype)

  def rows(self, ids: jax.Array, dtype) -> jax.Array:
    """Rows `ids` of W as `dtype` [..., K] (an embedding lookup)."""
    return quantized_rows(self.weight, ids).astype(dtype)
