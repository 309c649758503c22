"""The quantized CPU kernel behind `quantized_dense`: x @ W.T against a float64 numpy reference of the dequantized
matrix for every scheme, the row counts of both of its paths, and widths that are not multiples of its tiles; and
the cases routed to the XLA path."""

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.kernels import build, linear
from specjax.kernels.quantized import MAX_INT8_ACTIVATION_ROWS, applies, int8_activations, quantized_dense
from specjax.kernels.qweight import SCHEMES, QuantizedWeight

needs_kernel = pytest.mark.skipif(not build.registered(),
                                  reason=f"CPU kernel unavailable: {build.unavailable_reason()}")
ROWS = [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32]
# N: one row, tails after the 4-row (and 2-row) tiles, several chunks over the threads with a tail in the last;
# K: 1..48 blocks, scale counts with and without a remainder of 8.
SHAPES = [(1, 32), (7, 64), (13, 96), (195, 576), (1027, 576), (66, 1536)]


def _weight(rng, scheme, n, k):
  if scheme in ("int8", "q8_0"):
    q = rng.integers(-128, 128, (n, k), dtype=np.int8)
  else:
    q = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
  scales = 1 if scheme == "int8" else k // 32
  scale = (rng.standard_normal((n, scales)) * 0.05).astype(np.float16)  # both signs
  minimum = ((rng.standard_normal((n, k // 32)) * 0.3).astype(np.float16) if scheme == "q4_1"
             else np.zeros((0,), np.float16))
  return QuantizedWeight(q=jnp.asarray(q), scale=jnp.asarray(scale), minimum=jnp.asarray(minimum), scheme=scheme)


def _reference(w: QuantizedWeight):
  """W [N, K] in float64 straight from qweight.py's table, as the part the kernel multiplies by x's integers and
  the 4-bit offsets it multiplies by x's block sums: (integer part, offsets)."""
  q, scale = np.asarray(w.q), np.asarray(w.scale).astype(np.float64)
  n, k = w.shape
  d = np.repeat(scale, k // scale.shape[1], axis=1)
  if w.scheme in ("int8", "q8_0"):
    return q.astype(np.float64) * d, np.zeros((n, k))
  blocks = q.reshape(n, k // 32, 16)
  nibbles = np.concatenate([blocks & 0xF, blocks >> 4], axis=2).reshape(n, k).astype(np.float64)
  if w.scheme == "q4_0":
    return nibbles * d, -8 * d
  return nibbles * d, np.repeat(np.asarray(w.minimum).astype(np.float64), 32, axis=1)


def _int8_blocks(x):
  """x [M, K] float32 rounded as the kernel's int8-activation path does (float32 arithmetic), back as float64."""
  blocks = x.reshape(x.shape[0], -1, 32)
  d = (np.max(np.abs(blocks), axis=2, keepdims=True) / np.float32(127)).astype(np.float32)
  inverse = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
  xq = np.clip(np.rint(blocks * inverse), -127, 127)
  return (xq.astype(np.float64) * d).reshape(x.shape)


def _check(got, x, w, kernel: bool = True):
  """got against the reference; `kernel`: got came from the CPU kernel (its int8-activation path for 1..4 rows
  when `int8_activations()`), else from the XLA path."""
  integer, offsets = _reference(w)
  x32 = np.asarray(x, np.float32).reshape(-1, w.shape[1])
  x64 = x32.astype(np.float64)
  rounded = (_int8_blocks(x32) if kernel and int8_activations() and len(x32) <= MAX_INT8_ACTIVATION_ROWS
             else x64)
  expected = (rounded @ integer.T + x64 @ offsets.T).reshape(got.shape)
  bound = 2e-6 * (np.abs(rounded) @ np.abs(integer).T + np.abs(x64) @ np.abs(offsets).T).reshape(got.shape) + 1e-30
  error = np.abs(np.asarray(got, np.float64) - expected)
  assert np.all(error <= bound), f"worst error / bound {np.max(error / bound):.3g}"


@pytest.fixture(params=["int8", "int8_avx2", "float"])
def activations(request, monkeypatch):
  """Every register path of the kernel: int8 activations (VNNI where the CPU has it), the same with AVX2 only, and
  float ones."""
  monkeypatch.setenv("SPECJAX_INT8_ACTIVATIONS", {"int8": "1", "int8_avx2": "avx2", "float": "0"}[request.param])
  assert int8_activations() == (request.param != "float")
  return request.param


def test_a_bad_activation_setting_is_named(monkeypatch):
  monkeypatch.setenv("SPECJAX_INT8_ACTIVATIONS", "vnni")
  with pytest.raises(ValueError, match="SPECJAX_INT8_ACTIVATIONS must be one of"):
    int8_activations()


def _jit():
  """A fresh jit each time: its trace cache does not know about `use_kernels`."""
  return jax.jit(lambda x, w: quantized_dense(x, w))


def _lowered(x, w) -> str:
  return _jit().lower(x, w).as_text()


@needs_kernel
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("n_dim,k_dim", SHAPES)
def test_kernel_matches_the_float64_reference(scheme, n_dim, k_dim, activations):
  """Every row count the kernel takes (1-4 on the register path, 5-32 on the tile path), x of both signs and of
  large magnitude."""
  rng = np.random.default_rng(zlib.crc32(f"{scheme} {n_dim} {k_dim}".encode()))
  w = _weight(rng, scheme, n_dim, k_dim)
  fn = _jit()
  for rows in ROWS:
    x = (rng.standard_normal((rows, k_dim)) * (1e3 if rows % 2 else 1.0)).astype(np.float32)
    assert applies(x, w) and build.QUANT_TARGET_NAME in _lowered(x, w)
    got = fn(jnp.asarray(x), w)
    assert got.shape == (rows, n_dim) and got.dtype == jnp.float32
    _check(got, x, w)


@needs_kernel
@pytest.mark.parametrize("scheme", SCHEMES)
def test_leading_dimensions_and_a_loop_body(scheme, activations):
  """x [B, T, K] is B * T rows; the kernel in a `lax.scan` body and a `lax.while_loop` gives the same products."""
  rng = np.random.default_rng(1)
  w = _weight(rng, scheme, 70, 128)
  x = jnp.asarray(rng.standard_normal((2, 3, 128)).astype(np.float32))
  assert build.QUANT_TARGET_NAME in _lowered(x, w)
  got = _jit()(x, w)
  assert got.shape == (2, 3, 70)
  _check(got, x, w)

  xs = jnp.asarray(rng.standard_normal((4, 5, 128)).astype(np.float32))
  scanned = jax.jit(lambda xs, w: jax.lax.scan(lambda c, x: (c, quantized_dense(x, w)), 0, xs)[1])
  assert build.QUANT_TARGET_NAME in scanned.lower(xs, w).as_text()
  ys = scanned(xs, w)
  for i in range(4):
    _check(ys[i], xs[i], w)

  def body(state):
    i, acc = state
    return i + 1, acc + quantized_dense(xs[i], w)

  looped = jax.jit(lambda w: jax.lax.while_loop(lambda s: s[0] < 4, body, (0, jnp.zeros((5, 70))))[1])
  total = looped(w)
  np.testing.assert_allclose(np.asarray(total), np.asarray(jnp.sum(ys, axis=0)), rtol=1e-5, atol=1e-4)


@needs_kernel
@pytest.mark.parametrize("scheme", SCHEMES)
def test_outside_the_kernel_range_is_the_xla_path(scheme):
  """33 rows, bf16 x and the kernels turned off lower without the kernel, and give the same products."""
  rng = np.random.default_rng(2)
  w = _weight(rng, scheme, 45, 96)
  x33 = rng.standard_normal((33, 96)).astype(np.float32)
  assert not applies(x33, w) and build.QUANT_TARGET_NAME not in _lowered(x33, w)
  _check(_jit()(x33, w), x33, w, kernel=False)
  x_bf16 = jnp.asarray(x33[:4], jnp.bfloat16)
  assert build.QUANT_TARGET_NAME not in _lowered(x_bf16, w)
  x4 = x33[:4]
  kernel = _jit()(x4, w)
  with linear.use_kernels(False):
    assert not applies(x4, w) and build.QUANT_TARGET_NAME not in _lowered(x4, w)
    off = _jit()(x4, w)
  _check(off, x4, w, kernel=False)
  _check(kernel, x4, w)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_xla_path_matches_the_float64_reference(scheme):
  """The path every platform has (no kernel needed)."""
  rng = np.random.default_rng(3)
  w = _weight(rng, scheme, 13, 64)
  x = rng.standard_normal((3, 64)).astype(np.float32)
  with linear.use_kernels(False):
    _check(_jit()(x, w), x, w, kernel=False)


@needs_kernel
def test_concurrent_calls():
  """Programs run from several threads at once share the kernel's helper threads (or fall back to XLA's pool)
  and each still gets its own products."""
  import concurrent.futures

  rng = np.random.default_rng(4)
  w = _weight(rng, "q4_1", 1024, 576)
  xs = [rng.standard_normal((1 + i % 3, 576)).astype(np.float32) for i in range(8)]
  fn = _jit()
  expected = [np.asarray(fn(x, w)) for x in xs]

  def work(i):
    return [np.asarray(fn(xs[i], w)) for _ in range(20)]

  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    results = list(pool.map(work, range(8)))
  for i, runs in enumerate(results):
    _check(runs[0], xs[i], w)
    for got in runs:
      np.testing.assert_array_equal(got, expected[i])
