"""`dense(x, kernel)`: the model's one matmul with a weight, routed to the CPU skinny kernel where it pays.

XLA's CPU dot is bandwidth-bound for prefill-sized blocks (GEMM), but not for the 1..32 rows of a decode step, a
K+1 verification or a small decode batch (one row: about 12 GB/s of weights against the kernel's 15 on this
project's 2-core CPU); those go to `cpu_linear.cc` when the program is lowered for CPU, float32, unsharded.
Everything else (GPU, TPU, bf16, sharded meshes, gradients) is XLA's dot; under `bf16_gemm(True)` a float32 dot
of more than MAX_ROWS rows takes bfloat16 operands and accumulates in float32 (AMX / AVX512-BF16 on Intel CPUs).
"""

import contextlib
import contextvars
import math

import jax
import jax.numpy as jnp

from specjax.kernels import build

MIN_ROWS, MAX_ROWS = 1, 32
_ENABLED = contextvars.ContextVar("specjax_cpu_kernels", default=True)
_BF16_GEMM = contextvars.ContextVar("specjax_bf16_gemm", default=False)


@contextlib.contextmanager
def use_kernels(enabled: bool):
  """Within this block (at trace time), `dense` may (True) or may not (False) call the CPU kernel; sharded
  programs turn it off because a custom call has no partitioning rule."""
  token = _ENABLED.set(bool(enabled))
  try:
    yield
  finally:
    _ENABLED.reset(token)


def kernels_enabled() -> bool:
  return _ENABLED.get() and build.registered()


@contextlib.contextmanager
def bf16_gemm(enabled: bool):
  """Within this block (at trace time), `dense`'s and `gemm`'s float32 products of more than MAX_ROWS rows round both
  operands to bfloat16 and accumulate in float32: XLA:CPU then calls its bf16 GEMM, 2x the target's prefill-shaped
  pass on an AMX CPU (docs/results.md section 48), at about 1% error in the features. Off by default: it changes
  numerics."""
  token = _BF16_GEMM.set(bool(enabled))
  try:
    yield
  finally:
    _BF16_GEMM.reset(token)


def _kernel_call(x_MxK, w, transposed: bool):
  n = w.shape[0] if transposed else w.shape[1]
  out = jax.ShapeDtypeStruct((x_MxK.shape[0], n), jnp.float32)
  return jax.ffi.ffi_call(build.TARGET_NAME, out, vmap_method="sequential")(x_MxK, w, transposed=transposed)


def _skinny_impl(x_MxK, w, transposed):
  return jax.lax.platform_dependent(x_MxK, w, cpu=lambda x, w: _kernel_call(x, w, transposed),
                                    default=lambda x, w: xla_dot(x, w, transposed))


def _skinny_fwd(x_MxK, w, transposed):
  return _skinny_impl(x_MxK, w, transposed), (x_MxK, w)


def _weight_grad(transposed: bool, x_MxK, g_MxN):
  """d loss / d w of x @ w (w [N, K] when transposed), in the input's dtype."""
  return g_MxN.T @ x_MxK if transposed else x_MxK.T @ g_MxN


def _skinny_bwd(transposed, residuals, g_MxN):
  x_MxK, w = residuals
  return (g_MxN @ w if transposed else g_MxN @ w.T), _weight_grad(transposed, x_MxK, g_MxN)


_skinny = jax.custom_vjp(_skinny_impl, nondiff_argnums=(2,))
_skinny.defvjp(_skinny_fwd, _skinny_bwd)


def xla_dot(x, w, transposed: bool):
  """x [..., K] @ w (w [N, K] when transposed) as XLA's dot, off the CPU kernels (the packed kernel's fallback too)."""
  spec = "...k,nk->...n" if transposed else "...k,kn->...n"
  if math.prod(x.shape[:-1]) != 1:
    return jnp.einsum(spec, x, w)
  return jax.lax.platform_dependent(x, w, cuda=lambda x, w: _two_row_dot(spec, x, w),
                                    default=lambda x, w: jnp.einsum(spec, x, w))


def _two_row_dot(spec: str, x, w):
  """A one-row product computed as two rows, the second zeros: XLA:GPU lowers a one-row dot as a reduction, about
  5x slower than its GEMM for a Llama-3-8B layer's 4096 x 1024 projections on an H200 (docs/results.md section 33)."""
  x_2xK = jnp.concatenate([x.reshape(1, -1), jnp.zeros((1, x.shape[-1]), x.dtype)])
  return jnp.einsum(spec, x_2xK, w)[:1].reshape(x.shape[:-1] + (-1,))


def skinny_rows(x_NxK) -> int | None:
  """The rows of x [..., K] when a CPU kernel may take them (1..32 float32 rows, kernels on), else None: the one
  routing rule of the fp32 and the quantized matmul kernels (at trace time)."""
  rows = math.prod(x_NxK.shape[:-1])
  if MIN_ROWS <= rows <= MAX_ROWS and x_NxK.dtype == jnp.float32 and kernels_enabled():
    return rows
  return None


def dense(x_NxK, w, *, transposed: bool = False):
  """x [..., K] @ w [K, N] (or w [N, K] with transposed=True, e.g. a tied embedding used as the head)."""
  rows = skinny_rows(x_NxK)
  if rows is not None and w.dtype == jnp.float32:
    out = _skinny(x_NxK.reshape(rows, x_NxK.shape[-1]), w, transposed)
    return out.reshape(x_NxK.shape[:-1] + out.shape[-1:])
  return gemm(x_NxK, w, transposed=transposed)


def gemm(x_NxK, w, *, transposed: bool = False):
  """x [..., K] @ w as XLA's dot, never the skinny kernel; under `bf16_gemm`, more than MAX_ROWS float32 rows on
  bfloat16 operands (gradients too: dx on them, dw in float32)."""
  if _BF16_GEMM.get() and math.prod(x_NxK.shape[:-1]) > MAX_ROWS and x_NxK.dtype == w.dtype == jnp.float32:
    out = _bf16_product(x_NxK.reshape(-1, x_NxK.shape[-1]), w, transposed)
    return out.reshape(x_NxK.shape[:-1] + out.shape[-1:])
  return xla_dot(x_NxK, w, transposed)


def _bf16_dot(a, b, contract_b: int):
  """a [M, K] . b contracted over b's axis `contract_b`, bfloat16 operands, float32 sums: the two operand layouts
  XLA:CPU hands to its bf16 GEMM (a contraction over a's rows, as in x^T g, falls to a path slower than float32)."""
  return jax.lax.dot_general(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), (((1,), (contract_b,)), ((), ())),
                             preferred_element_type=jnp.float32)


def _bf16_product_impl(x_MxK, w, transposed):
  return _bf16_dot(x_MxK, w, 1 if transposed else 0)


def _bf16_product_fwd(x_MxK, w, transposed):
  return _bf16_product_impl(x_MxK, w, transposed), (x_MxK, w)


def _bf16_product_bwd(transposed, residuals, g_MxN):
  """dx on the bf16 GEMM too; dw (a contraction over the rows) in float32, where XLA:CPU's bf16 path is slower."""
  x_MxK, w = residuals
  return _bf16_dot(g_MxN, w, 0 if transposed else 1), _weight_grad(transposed, x_MxK, g_MxN)


_bf16_product = jax.custom_vjp(_bf16_product_impl, nondiff_argnums=(2,))
_bf16_product.defvjp(_bf16_product_fwd, _bf16_product_bwd)
