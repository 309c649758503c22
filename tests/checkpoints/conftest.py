"""Tiny random Llama (GQA, untied head, Llama-3 RoPE scaling) and Qwen2 (qkv bias, tied) saved by HF transformers."""

import pytest


def _randomize(model, seed: int):
  """Every parameter random (HF zero-inits biases and ones-inits norms, which would hide mapping mistakes)."""
  import torch
  generator = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, param in model.named_parameters():
      noise = torch.randn(param.shape, generator=generator)
      param.copy_(1.0 + 0.1 * noise if name.endswith("norm.weight") else 0.2 * noise)
  return model.eval()


def _save(model, directory, **kwargs):
  model.save_pretrained(directory, **kwargs)
  return str(directory)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
  """(directory, torch model): sharded safetensors with an index."""
  transformers = pytest.importorskip("transformers")
  config = transformers.LlamaConfig(
      vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
      intermediate_size=96, max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
      rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 64, "rope_theta": 10000.0},
      bos_token_id=1, eos_token_id=[2, 3], architectures=["LlamaForCausalLM"])
  model = _randomize(transformers.LlamaForCausalLM(config), seed=0)
  return _save(model, tmp_path_factory.mktemp("tiny_llama"), max_shard_size="100KB"), model


@pytest.fixture(scope="session")
def tiny_qwen2(tmp_path_factory):
  transformers = pytest.importorskip("transformers")
  config = transformers.Qwen2Config(
      vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
      intermediate_size=96, max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
      rope_theta=1000000.0, eos_token_id=5, architectures=["Qwen2ForCausalLM"])
  model = _randomize(transformers.Qwen2ForCausalLM(config), seed=1)
  return _save(model, tmp_path_factory.mktemp("tiny_qwen2")), model
