"""The CPU skinny-matmul kernel behind `dense`: the same products as XLA's dot for every row count it takes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.kernels import build, linear

pytestmark = pytest.mark.skipif(not build.registered(), reason=f"CPU kernel unavailable: {build.unavailable_reason()}")


@pytest.mark.parametrize("rows", [1, 2, 5, 32])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("k_dim,n_dim", [(577, 203), (3, 7), (9, 2)])
def test_kernel_matches_xla_dot(rows, transposed, k_dim, n_dim):
  """Odd sizes reach the kernel's tails: rows left over after its four side-by-side streams, and sizes too small
  for any stream. Rows 1..32 are all routed to it."""
  rng = np.random.default_rng(rows)
  x = rng.standard_normal((rows, k_dim)).astype(np.float32)
  w = rng.standard_normal((n_dim, k_dim) if transposed else (k_dim, n_dim)).astype(np.float32)
  lowered = jax.jit(lambda x, w: linear.dense(x, w, transposed=transposed)).lower(x, w).as_text()
  assert "specjax_cpu_linear" in lowered
  expected = x.astype(np.float64) @ (w.T if transposed else w).astype(np.float64)
  got = np.asarray(jax.jit(lambda x, w: linear.dense(x, w, transposed=transposed))(x, w))
  np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)


def test_outside_the_kernel_range_is_xla_dot():
  """33 rows (prefill), bf16 and a turned-off kernel lower to XLA's dot."""
  w = jnp.ones((64, 16), jnp.float32)
  as_text = lambda x, w: jax.jit(linear.dense).lower(x, w).as_text()
  assert "specjax_cpu_linear" not in as_text(jnp.ones((33, 64), jnp.float32), w)
  assert "specjax_cpu_linear" not in as_text(jnp.ones((4, 64), jnp.bfloat16), w.astype(jnp.bfloat16))
  with linear.use_kernels(False):
    assert "specjax_cpu_linear" not in as_text(jnp.ones((4, 64), jnp.float32), w)


def test_gradient_through_the_kernel_matches_xla():
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.standard_normal((3, 40)).astype(np.float32))
  w = jnp.asarray(rng.standard_normal((40, 24)).astype(np.float32))
  loss = lambda x, w: jnp.sum(jnp.sin(linear.dense(x, w)))
  reference = lambda x, w: jnp.sum(jnp.sin(x @ w))
  for got, want in zip(jax.grad(loss, (0, 1))(x, w), jax.grad(reference, (0, 1))(x, w)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("transposed", [False, True])
def test_one_row_products_are_two_rows_on_gpus_only(transposed):
  """XLA:GPU makes a one-row dot a slow reduction: lowered for CUDA the row is padded to two (then sliced);
  lowered for CPU or TPU it stays one, and the result is x @ w either way."""
  x = jax.random.normal(jax.random.key(0), (1, 1, 64), jnp.bfloat16)
  w = jax.random.normal(jax.random.key(1), (32, 64) if transposed else (64, 32), jnp.bfloat16)
  with linear.use_kernels(False):
    product = jax.jit(lambda x, w: linear.dense(x, w, transposed=transposed))
    traced = product.trace(x, w)
    assert "tensor<2x64xbf16>" in traced.lower(lowering_platforms=("cuda",)).as_text()
    for platform in ("cpu", "tpu"):
      assert "tensor<2x64xbf16>" not in traced.lower(lowering_platforms=(platform,)).as_text()
    want = x.astype(jnp.float32) @ (w.T if transposed else w).astype(jnp.float32)
    np.testing.assert_allclose(np.asarray(product(x, w), np.float32), np.asarray(want), rtol=2e-2, atol=2e-2)
