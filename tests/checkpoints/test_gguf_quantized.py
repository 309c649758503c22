"""load_model(weights="q4" | "int8"): the GGUF's own blocks kept bit for bit, logits against the float load, other
checkpoint kinds quantized from floats, and the errors for what cannot be kept."""

import gguf
import numpy as np
import pytest

import specjax
from specjax.checkpoints import load_model
from specjax.checkpoints.gguf import open_gguf
from specjax.kernels.qweight import QuantizedWeight
from specjax.model import model_from_flat_params
from specjax.quantize import float_flat_params, is_quantized, to_gguf_blocks, weight_schemes

# GGUF tensor -> (specjax module, heads whose rows llama.cpp permuted, or 0)
TENSORS = {"token_embd.weight": ("embed", 0), "blk.0.attn_q.weight": ("layers.0.attn.q", 9),
           "blk.0.attn_k.weight": ("layers.0.attn.k", 3), "blk.7.attn_v.weight": ("layers.7.attn.v", 0),
           "blk.13.ffn_down.weight": ("layers.13.mlp.down", 0), "blk.29.ffn_gate.weight": ("layers.29.mlp.gate", 0),
           "blk.29.attn_output.weight": ("layers.29.attn.o", 0)}


def _llama_cpp_permute(w, n_heads):
  return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.fixture(scope="module")
def smollm2_q4(smollm2_path):
  return load_model(smollm2_path, weights="q4")


def _weight(model, name) -> QuantizedWeight:
  flat = model.flat_params()
  scheme = weight_schemes(model)[name]
  minimum = flat.get(f"{name}.minimum", np.zeros((0,), np.float16))
  return QuantizedWeight(q=flat[f"{name}.q"], scale=flat[f"{name}.scale"], minimum=minimum, scheme=scheme)


def test_smollm2_q4_keeps_the_files_blocks_bit_for_bit(smollm2_path, smollm2_q4):
  reader = open_gguf(smollm2_path)
  raw = {t.name: t for t in reader.tensors}
  schemes = weight_schemes(smollm2_q4)
  assert schemes["embed"] == "q8_0" and set(schemes.values()) == {"q4_1", "q8_0"} and len(schemes) == 7 * 30 + 1
  assert smollm2_q4.flat_params()["final_norm.scale"].dtype == np.float32
  for tensor_name, (name, heads) in TENSORS.items():
    w = _weight(smollm2_q4, name)
    assert w.scheme == raw[tensor_name].tensor_type.name.lower()
    blocks = to_gguf_blocks(w)
    if heads:  # the loader undid llama.cpp's Q/K row permutation on whole rows
      blocks = _llama_cpp_permute(blocks, heads)
    np.testing.assert_array_equal(blocks, raw[tensor_name].data, err_msg=tensor_name)


def test_smollm2_q4_logits_equal_the_float_load(smollm2_model, smollm2_q4, specjax_last_logits):
  """The float load dequantizes the very same blocks, so only summation order may differ."""
  tokenizer = smollm2_model.tokenizer
  prompts = [tokenizer.encode(p) for p in ("The capital of France is", "def fibonacci(n):\n    if n < 2:")]
  ours, reference = specjax_last_logits(smollm2_q4, prompts), specjax_last_logits(smollm2_model, prompts)
  spread = reference.max(axis=-1) - reference.min(axis=-1)
  assert (np.abs(ours - reference).max(axis=-1) < 1e-4 * spread).all()
  assert (ours.argmax(-1) == reference.argmax(-1)).all()


def test_int8_from_gguf_dequantizes_then_quantizes_every_linear(smollm2_path, smollm2_model):
  model = load_model(smollm2_path, weights="int8")
  assert set(weight_schemes(model).values()) == {"int8"} and len(weight_schemes(model)) == 7 * 30 + 1
  assert model.param_bytes < smollm2_model.param_bytes / 3.5


def test_hf_directory_quantizes_from_floats(tiny_llama, specjax_last_logits):
  directory, _ = tiny_llama
  float_model = load_model(directory)
  for weights, scheme, heads in (("q4", "q4_1", "q8_0"), ("int8", "int8", "int8")):
    model = load_model(directory, weights=weights)
    schemes = weight_schemes(model)
    assert {s for name, s in schemes.items() if name not in ("embed", "head")} == {scheme}
    assert schemes["embed"] == schemes["head"] == heads and not model.config.tie_embeddings
    dequantized = model_from_flat_params(model.config, float_flat_params(model))
    ours, reference = (specjax_last_logits(m, [[1, 17, 42, 8, 93]]) for m in (model, dequantized))
    np.testing.assert_allclose(ours, reference, atol=1e-4, rtol=0)
    for name, w in float_model.flat_params().items():  # the float checkpoint's weights, quantized
      error = np.abs(np.asarray(dequantized.flat_params()[name]) - np.asarray(w))
      assert error.max() <= 0.15 * np.abs(np.asarray(w)).max(), name
  assert not is_quantized(float_model)


def test_bad_weights_value_is_rejected(tiny_llama):
  with pytest.raises(ValueError, match=r"weights must be one of \['float', 'int8', 'q4'\], got 'q5'"):
    load_model(tiny_llama[0], weights="q5")


def _write(path, tensors, types):
  """A one-layer llama GGUF (d_model 256, 4 heads) with the given tensors, each written as `types[name]`."""
  writer = gguf.GGUFWriter(str(path), "llama")
  for key, value in (("block_count", 1), ("context_length", 64), ("embedding_length", 256),
                     ("feed_forward_length", 256), ("head_count", 4), ("head_count_kv", 4)):
    getattr(writer, f"add_{key}")(value)
  for name, w in tensors.items():
    qtype = types.get(name, gguf.GGMLQuantizationType.F32)
    if qtype == gguf.GGMLQuantizationType.F32:
      writer.add_tensor(name, w)
    elif qtype == gguf.GGMLQuantizationType.Q6_K:  # gguf cannot quantize Q6_K: random blocks with d = 0.001
      blocks = np.random.default_rng(0).integers(0, 256, (w.shape[0], w.shape[1] // 256, 210), dtype=np.uint8)
      blocks[..., 208:] = np.full(blocks.shape[:2] + (1,), 0.001, np.float16).view(np.uint8)
      writer.add_tensor(name, blocks.reshape(w.shape[0], -1), raw_dtype=qtype)
    else:
      writer.add_tensor(name, gguf.quants.quantize(w, qtype), raw_dtype=qtype)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return str(path)


@pytest.fixture(scope="module")
def tiny_tensors():
  rng = np.random.default_rng(0)
  shapes = {"token_embd.weight": (64, 256), "output_norm.weight": (256,), "blk.0.attn_norm.weight": (256,),
            "blk.0.ffn_norm.weight": (256,)}
  shapes.update({f"blk.0.{p}.weight": (256, 256) for p in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate",
                                                           "ffn_up", "ffn_down")})
  return {name: (rng.normal(size=s) * (0.05 if len(s) == 2 else 1)).astype(np.float32) for name, s in shapes.items()}


def test_q4_on_a_gguf_keeps_q4_0_and_quantizes_its_float_matrices(tiny_tensors, tmp_path):
  path = _write(tmp_path / "mixed.gguf", tiny_tensors, {"blk.0.ffn_up.weight": gguf.GGMLQuantizationType.Q4_0,
                                                        "blk.0.attn_v.weight": gguf.GGMLQuantizationType.Q8_0})
  schemes = weight_schemes(load_model(path, weights="q4"))
  assert schemes["layers.0.mlp.up"] == "q4_0" and schemes["layers.0.attn.v"] == "q8_0"
  assert schemes["layers.0.mlp.down"] == "q4_1" and schemes["embed"] == "q8_0"  # a 4-bit model's embedding


def test_a_type_that_cannot_be_kept_is_named_with_what_to_use(tiny_tensors, tmp_path):
  path = _write(tmp_path / "q6k.gguf", tiny_tensors, {"blk.0.ffn_gate.weight": gguf.GGMLQuantizationType.Q6_K})
  with pytest.raises(ValueError, match=r"blk\.0\.ffn_gate\.weight is Q6_K.*weights=\"int8\".*Q4_0 / Q4_1 / Q8_0"):
    load_model(path, weights="q4")
  model = load_model(path, weights="int8")  # requantized from the dequantized floats
  assert weight_schemes(model)["layers.0.mlp.gate"] == "int8"
  assert isinstance(specjax.load_model(path), specjax.Model)
