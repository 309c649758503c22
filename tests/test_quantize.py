"""Quantizers against the `gguf` package's reference, their error bounds, and models on quantized weights (logits,
sharding, bad input)."""

import gguf
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.cache import init_cache
from specjax.kernels.qweight import QuantizedWeight, dequantize
from specjax.model import model_from_flat_params
from specjax.quantize import (GGUF_TYPES, HEADS, float_flat_params, from_gguf_blocks, is_quantized, quantize,
                              quantize_model, quantized_model, scheme_name, to_gguf_blocks, weight_schemes)
from specjax.sharding import make_mesh, param_shardings

CONFIG = specjax.ModelConfig(vocab_size=64, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128,
                             max_seq_len=64, tie_embeddings=False, qkv_bias=True)
GREEDY = specjax.SamplingParams(temperature=0.0)


def _weights(rows=24, k=96, seed=0):
  """Normal weights with the blocks quantizers trip on: all zeros, constant, one outlier, all negative."""
  w = np.random.default_rng(seed).normal(size=(rows, k)).astype(np.float32)
  w[0, :32] = 0.0
  w[1, 32:64] = 0.25
  w[2, 64:] *= 0.01
  w[2, 70] = 9.0
  w[3, :32] = -np.abs(w[3, :32])
  return w


@pytest.mark.parametrize("scheme", ["q8_0", "q4_0", "q4_1"])
def test_block_quantizers_are_ggufs_bit_for_bit(scheme):
  w = _weights()
  qw = quantize(w, scheme, "w")
  reference = gguf.quants.quantize(w, GGUF_TYPES[scheme])
  np.testing.assert_array_equal(to_gguf_blocks(qw), reference)
  assert qw.shape == w.shape and qw.scheme == scheme and qw.scale.dtype == np.float16
  np.testing.assert_allclose(np.asarray(dequantize(qw)), gguf.quants.dequantize(reference, GGUF_TYPES[scheme]),
                             rtol=1e-6, atol=1e-7)
  split = from_gguf_blocks(reference, scheme)
  for field in ("q", "scale", "minimum"):
    np.testing.assert_array_equal(np.asarray(getattr(split, field)), np.asarray(getattr(qw, field)))


@pytest.mark.parametrize("scheme", ["q8_0", "q4_0", "q4_1"])
def test_block_dequantization_error_is_within_the_schemes_bound(scheme):
  w = _weights(seed=1)
  qw = quantize(w, scheme)
  error = np.abs(np.asarray(dequantize(qw)) - w).reshape(w.shape[0], -1, 32)
  d = np.abs(np.asarray(qw.scale, np.float32))[..., None]
  if scheme == "q8_0":   # round(x / d), d = amax / 127 rounded to f16 afterwards
    bound = d * (0.5 + 127 * 2.0**-11)
  elif scheme == "q4_0":  # (x / d + 8) truncated and clipped to 15: the block's far end is off by d
    bound = d * (1 + 8 * 2.0**-11)
  else:                   # d = (max - min) / 15, m = min, both f16
    m = np.abs(np.asarray(qw.minimum, np.float32))[..., None]
    bound = d * (0.5 + 15 * 2.0**-11) + m * 2.0**-11
  assert (error <= bound + 1e-7).all()


def test_int8_is_symmetric_per_row_and_within_half_a_step():
  w = _weights(rows=8, k=96)[:, :72]  # int8 has no blocks: any K
  qw = quantize(w, "int8")
  assert qw.q.dtype == np.int8 and qw.scale.shape == (8, 1) and qw.minimum.size == 0
  np.testing.assert_array_equal(qw.scale, (np.abs(w).max(axis=1, keepdims=True) / 127).astype(np.float16))
  assert np.abs(qw.q.astype(np.int32)).max() <= 127
  error = np.abs(np.asarray(dequantize(qw)) - w)
  assert (error <= np.asarray(qw.scale, np.float32) / 2 + 1e-7).all()
  zero = quantize(np.zeros((2, 8), np.float32), "int8")
  assert not np.asarray(zero.q).any() and np.isfinite(np.asarray(dequantize(zero))).all()


def test_bad_quantizer_input_is_rejected():
  with pytest.raises(ValueError, match=r"layers\.0\.attn\.q of shape \(4, 40\).*K=40 is not a multiple of .*32"):
    quantize(np.ones((4, 40), np.float32), "q4_1", "layers.0.attn.q")
  with pytest.raises(ValueError, match="unknown quantization scheme 'q3'"):
    quantize(np.ones((4, 32), np.float32), "q3")
  with pytest.raises(ValueError, match="matrix"):
    quantize(np.ones(32, np.float32), "int8")
  with pytest.raises(ValueError, match="do not divide"):
    from_gguf_blocks(np.zeros((2, 19), np.uint8), "q4_1")


@pytest.fixture(scope="module")
def model():
  return specjax.init_model(CONFIG, seed=1)


def _logits(m, ids):
  tokens = jnp.asarray([ids])
  return np.asarray(m.module()(tokens, jnp.arange(len(ids))[None, :], init_cache(m.config, 1, 32))[0][0])


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("scheme", ["int8", "q8_0", "q4_0", "q4"])
def test_quantized_logits_equal_the_dequantized_float_models(model, scheme, tied):
  base = model if not tied else specjax.init_model(CONFIG.replace(tie_embeddings=True, qkv_bias=False), seed=2)
  quantized = quantize_model(base, scheme)
  assert is_quantized(quantized) and not is_quantized(base)
  stored, schemes = scheme_name(scheme), weight_schemes(quantized)
  assert {s for name, s in schemes.items() if name not in HEADS} == {stored}
  # A 4-bit model's embedding and head are q8_0 blocks (the tied head's logits decide acceptance).
  assert {s for name, s in schemes.items() if name in HEADS} == {"q8_0" if stored.startswith("q4") else stored}
  assert len(weight_schemes(quantized)) == 7 * CONFIG.n_layers + (1 if tied else 2)
  assert quantized.param_bytes < base.param_bytes / 3
  dequantized = model_from_flat_params(base.config, float_flat_params(quantized))
  ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
  ours, reference, original = _logits(quantized, ids), _logits(dequantized, ids), _logits(base, ids)
  np.testing.assert_allclose(ours, reference, atol=2e-5, rtol=0)
  assert np.abs(ours - original).max() < 0.5 * np.abs(original).max()  # a quantized copy, not another model


def test_quantizing_a_quantized_model_dequantizes_first(model):
  q4 = quantize_model(model, "q4")
  int8 = quantize_model(q4, "int8")
  assert set(weight_schemes(int8).values()) == {"int8"}
  w = np.asarray(float_flat_params(q4)["layers.0.mlp.up.kernel"]).T
  np.testing.assert_array_equal(np.asarray(int8.flat_params()["layers.0.mlp.up.q"]), quantize(w, "int8").q)


def test_widths_that_are_not_blocks_name_the_tensor(model):
  narrow = specjax.init_model(CONFIG.replace(d_model=48, n_heads=4, n_kv_heads=2))
  with pytest.raises(ValueError, match=r"head of shape \(64, 48\) to q8_0: .*K=48 is not a multiple"):
    quantize_model(narrow, "q4")  # a 4-bit model's head is q8_0 blocks
  flat = {k: v for k, v in narrow.flat_params().items() if k not in ("embed", "head.kernel")}
  heads = {name: quantize(np.zeros((64, 48), np.float32), "int8") for name in ("embed", "head")}
  with pytest.raises(ValueError, match=r"layers.0.attn.[qkv] of shape \(\d+, 48\) to q4_1: .*K=48 is not a multiple"):
    quantized_model(narrow.config, flat | heads, "q4_1")
  assert is_quantized(quantize_model(narrow, "int8"))
  with pytest.raises(ValueError, match="unknown quantization scheme"):
    quantize_model(model, "fp8")


def _specs(mesh, model):
  return {".".join(str(p.key) for p in path[:-1]): s.spec for path, s in  # path[-1] is the Param's value
          jax.tree_util.tree_flatten_with_path(param_shardings(mesh, CONFIG, model.params))[0]}


def test_quantized_params_split_like_the_float_ones(model):
  mesh = make_mesh(4, 2)
  quantized = quantize_model(model, "q4")
  specs = _specs(mesh, quantized)
  model_rows, model_cols = jax.sharding.PartitionSpec("model", None), jax.sharding.PartitionSpec(None, "model")
  for name in ("embed", "head", "layers.0.attn.q", "layers.1.mlp.gate", "layers.1.mlp.up"):
    fields = ("q", "scale") if name in HEADS else ("q", "scale", "minimum")  # q8_0 heads have no minimum
    assert all(specs[f"{name}.{f}"] == model_rows for f in fields), name
  for name in ("layers.0.attn.o", "layers.1.mlp.down"):
    assert all(specs[f"{name}.{f}"] == model_cols for f in ("q", "scale", "minimum")), name
  assert specs["layers.0.attn.q.bias"] == jax.sharding.PartitionSpec("model")
  wide = _specs(make_mesh(2, 4), quantized)  # o's 2 blocks per row do not split 4 ways: its scales replicate
  assert wide["layers.0.attn.o.q"] == model_cols and wide["layers.0.attn.o.scale"] == jax.sharding.PartitionSpec()
  prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
  unsharded = specjax.generate(quantized, prompts, max_new_tokens=8, sampling=GREEDY).tokens
  assert specjax.generate(quantized, prompts, max_new_tokens=8, sampling=GREEDY, mesh=mesh).tokens == unsharded


def test_quantized_weight_shapes_are_checked(model):
  from specjax.quantize import quantized_model
  flat = model.flat_params()
  del flat["layers.0.mlp.up.kernel"]
  flat["layers.0.mlp.up"] = QuantizedWeight(q=np.zeros((128, 32), np.int8), scale=np.ones((128, 1), np.float16),
                                            minimum=np.zeros((0,), np.float16), scheme="int8")
  with pytest.raises(ValueError, match=r"layers\.0\.mlp\.up has shape \(128, 32\), expected \(128, 64\)"):
    quantized_model(CONFIG, flat, "int8")
