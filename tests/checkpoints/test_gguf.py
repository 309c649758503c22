"""GGUF: the real SmolLM2-135M file against HF transformers, synthetic files, and broken files."""

import math
import re
import shutil

import gguf
import numpy as np
import pytest

from specjax.checkpoints import load_model
from specjax.checkpoints.gguf import unpermute_rows

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Once upon a time, in a land far away, there lived",
    "Zürich, 東京 and 3.14159: ",
]


def test_smollm2_config(smollm2_model):
  config = smollm2_model.config
  assert (config.n_layers, config.d_model, config.n_heads, config.n_kv_heads) == (30, 576, 9, 3)
  assert (config.vocab_size, config.ffn_dim, config.tie_embeddings, config.qkv_bias) == (49152, 1536, True, False)
  assert config.rope_theta == 100000.0 and config.max_seq_len == 8192
  assert config.eos_token_ids == (2,) and config.bos_token_id == 1
  assert smollm2_model.tokenizer is not None


def test_smollm2_logits_match_transformers(smollm2_model, hf_smollm2, specjax_last_logits):
  import torch
  prompts = [smollm2_model.tokenizer.encode(p) for p in PROMPTS]
  ours = specjax_last_logits(smollm2_model, prompts)
  for row, ids in enumerate(prompts):
    with torch.no_grad():
      reference = hf_smollm2(torch.tensor([ids])).logits[0, -1].numpy()
    spread = reference.max() - reference.min()
    assert np.abs(ours[row] - reference).max() < 1e-3 * spread, PROMPTS[row]
    assert ours[row].argmax() == reference.argmax(), PROMPTS[row]


def _llama_cpp_permute(w, n_heads):
  """llama.cpp's convert_hf_to_gguf `permute` (HF half-split rows -> interleaved pairs)."""
  return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("shape", [(48, 7), (48,)])
def test_unpermute_rows_inverts_llama_cpp_permute(shape):
  w = np.random.default_rng(0).normal(size=shape).astype(np.float32)
  np.testing.assert_array_equal(unpermute_rows(_llama_cpp_permute(w, 3), 3), w)


# ---- synthetic files written with gguf.GGUFWriter from the tiny HF models --------------------------------------

_HF_TO_GGUF = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def _llama3_rope_freqs(config):
  """llama.cpp's `rope_freqs` tensor for Llama-3 scaling (convert_hf_to_gguf.py)."""
  rope = config.rope_parameters
  head_dim = config.hidden_size // config.num_attention_heads
  freqs = 1.0 / (rope["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
  factor, low, high, old = (rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"],
                            rope["original_max_position_embeddings"])
  out = []
  for freq in freqs:
    wavelen = 2 * math.pi / freq
    if wavelen < old / high:
      out.append(1.0)
    elif wavelen > old / low:
      out.append(factor)
    else:
      smooth = (old / wavelen - low) / (high - low)
      out.append(1 / ((1 - smooth) / factor + smooth))
  return np.asarray(out, dtype=np.float32), old


def _write_gguf(path, arch, hf_model, permute):
  config = hf_model.config
  writer = gguf.GGUFWriter(str(path), arch)
  writer.add_block_count(config.num_hidden_layers)
  writer.add_context_length(config.max_position_embeddings)
  writer.add_embedding_length(config.hidden_size)
  writer.add_feed_forward_length(config.intermediate_size)
  writer.add_head_count(config.num_attention_heads)
  writer.add_head_count_kv(config.num_key_value_heads)
  writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
  writer.add_layer_norm_rms_eps(config.rms_norm_eps)
  if config.rope_parameters.get("rope_type") == "llama3":
    freqs, original = _llama3_rope_freqs(config)
    writer.add_rope_scaling_orig_ctx_len(original)
    writer.add_tensor("rope_freqs.weight", freqs)
  for name, tensor in hf_model.state_dict().items():
    w = tensor.float().numpy()
    if name == "lm_head.weight" and config.tie_word_embeddings:
      continue
    if name == "model.embed_tokens.weight":
      writer.add_tensor("token_embd.weight", w)
    elif name == "model.norm.weight":
      writer.add_tensor("output_norm.weight", w)
    elif name == "lm_head.weight":
      writer.add_tensor("output.weight", w)
    else:
      layer, part, kind = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)", name).groups()
      if permute and part == "self_attn.q_proj":
        w = _llama_cpp_permute(w, config.num_attention_heads)
      if permute and part == "self_attn.k_proj":
        w = _llama_cpp_permute(w, config.num_key_value_heads)
      writer.add_tensor(f"blk.{layer}.{_HF_TO_GGUF[part]}.{kind}", w)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return path


def _compare_with_hf(model, hf_model):
  import torch
  ids = [1, 17, 42, 8, 93, 55, 3, 70, 21, 64, 9, 88, 30, 47, 12, 5]
  import jax.numpy as jnp
  from specjax.cache import init_cache
  logits, _, _ = model.module()(jnp.asarray([ids]), jnp.arange(len(ids))[None, :], init_cache(model.config, 1, 16))
  with torch.no_grad():
    reference = hf_model(torch.tensor([ids])).logits[0].numpy()
  np.testing.assert_allclose(np.asarray(logits[0]), reference, atol=1e-4, rtol=0)


def test_synthetic_llama_gguf_with_permuted_qk_and_rope_freqs(tiny_llama, tmp_path):
  _, hf_model = tiny_llama
  model = load_model(_write_gguf(tmp_path / "llama.gguf", "llama", hf_model, permute=True))
  assert model.config.rope_scaling == (4.0, 1.0, 4.0, 64.0) and not model.config.tie_embeddings
  assert model.tokenizer is None  # the file has no tokenizer metadata
  _compare_with_hf(model, hf_model)


def test_synthetic_qwen2_gguf(tiny_qwen2, tmp_path):
  _, hf_model = tiny_qwen2
  model = load_model(_write_gguf(tmp_path / "qwen2.gguf", "qwen2", hf_model, permute=False))
  assert model.config.qkv_bias and model.config.tie_embeddings
  _compare_with_hf(model, hf_model)


# ---- bad files -----------------------------------------------------------------------------------------------

def test_unsupported_architecture_is_named(tmp_path):
  path = tmp_path / "gpt2.gguf"
  writer = gguf.GGUFWriter(str(path), "gpt2")
  writer.add_block_count(1)
  writer.add_tensor("token_embd.weight", np.zeros((8, 4), np.float32))
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  with pytest.raises(ValueError, match="architecture 'gpt2' is not supported"):
    load_model(path)


@pytest.mark.parametrize("keep", [100, 2_000_000, 0.5], ids=["header", "metadata", "tensor-data"])
def test_truncated_gguf_is_refused(smollm2_path, tmp_path, keep):
  with open(smollm2_path, "rb") as f:
    data = f.read()
  path = tmp_path / "truncated.gguf"
  path.write_bytes(data[:int(keep * len(data)) if isinstance(keep, float) else keep])
  with pytest.raises(ValueError, match=re.escape(str(path))):
    load_model(path)


@pytest.mark.parametrize("content", [b"", b"GGUF" + bytes(range(256)) * 8, bytes(range(256)) * 8],
                         ids=["empty", "garbage-after-magic", "garbage"])
def test_corrupt_gguf_is_refused(tmp_path, content):
  path = tmp_path / "corrupt.gguf"
  path.write_bytes(content)
  with pytest.raises(ValueError, match=re.escape(str(path))):
    load_model(path)


def test_copy_of_real_file_still_loads_config(smollm2_path, tmp_path):
  """The truncation tests above are meaningful: an intact copy at a new path reads fine."""
  from specjax.checkpoints.gguf import gguf_config, open_gguf, read_metadata
  copy = tmp_path / "copy.gguf"
  shutil.copyfile(smollm2_path, copy)
  reader = open_gguf(copy)
  shapes = {t.name: tuple(reversed([int(d) for d in t.shape])) for t in reader.tensors}
  assert gguf_config(read_metadata(reader), shapes).n_layers == 30
