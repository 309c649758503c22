"""`linear.bf16_gemm`: prefill-shaped float32 products on bfloat16 operands with float32 accumulation, and nothing else
changed (skinny rows, other dtypes, outside the block)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.kernels import linear


def _dense(x, w, transposed, enabled):
  def f(x, w):
    with linear.bf16_gemm(enabled):
      return linear.dense(x, w, transposed=transposed)
  return np.asarray(jax.jit(f)(x, w))


@pytest.mark.parametrize("transposed", [False, True])
def test_prefill_rows_take_bf16_operands_and_accumulate_in_float32(transposed):
  rng = np.random.default_rng(0)
  x = rng.standard_normal((2, 40, 96)).astype(np.float32)   # 80 rows > MAX_ROWS
  w = rng.standard_normal((72, 96) if transposed else (96, 72)).astype(np.float32)
  got = _dense(x, w, transposed, True)
  assert got.dtype == np.float32
  w_kn = w.T if transposed else w
  as_bf16 = lambda a: np.asarray(jnp.asarray(a, jnp.bfloat16).astype(jnp.float32), np.float64)
  np.testing.assert_allclose(got, as_bf16(x) @ as_bf16(w_kn), rtol=1e-4, atol=1e-3)   # bf16 operands, fp32 sums
  exact = x.astype(np.float64) @ w_kn.astype(np.float64)
  assert np.abs(got - exact).max() > 1e-3                                            # the rounding is real ...
  assert np.median(np.abs(got - exact)) < 0.02 * np.median(np.abs(exact))           # ... and about 1% of a value
  np.testing.assert_allclose(_dense(x, w, transposed, False), exact, rtol=1e-4, atol=1e-3)  # off: float32


def test_skinny_rows_and_other_dtypes_are_unchanged():
  rng = np.random.default_rng(1)
  w = rng.standard_normal((64, 48)).astype(np.float32)
  skinny = rng.standard_normal((linear.MAX_ROWS, 64)).astype(np.float32)
  np.testing.assert_array_equal(_dense(skinny, w, False, True), _dense(skinny, w, False, False))
  wide_bf16 = jnp.asarray(rng.standard_normal((64, 64)), jnp.bfloat16)
  np.testing.assert_array_equal(_dense(wide_bf16, jnp.asarray(w, jnp.bfloat16), False, True),
                                _dense(wide_bf16, jnp.asarray(w, jnp.bfloat16), False, False))


def test_the_switch_is_scoped_to_its_block():
  with linear.bf16_gemm(True):
    assert linear._BF16_GEMM.get()
    with linear.bf16_gemm(False):
      assert not linear._BF16_GEMM.get()
    assert linear._BF16_GEMM.get()
  assert not linear._BF16_GEMM.get()
