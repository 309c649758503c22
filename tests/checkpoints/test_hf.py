"""Hugging Face safetensors directories: logits equal HF transformers' for tiny random Llama and Qwen2."""

import copy
import json
import os
import shutil

import numpy as np
import pytest

from specjax.checkpoints import load_model
from specjax.checkpoints.hf import hf_config

torch = pytest.importorskip("torch")

IDS = [1, 17, 42, 8, 93, 55, 3, 70, 21, 64, 9, 88, 30, 47, 12, 5, 76, 60, 33, 2]


def _all_logits(model, ids):
  import jax.numpy as jnp
  from specjax.cache import init_cache
  tokens_1xT = jnp.asarray([ids], dtype=jnp.int32)
  positions_1xT = jnp.arange(len(ids), dtype=jnp.int32)[None, :]
  logits, _, _ = model.module()(tokens_1xT, positions_1xT, init_cache(model.config, 1, len(ids)))
  return np.asarray(logits[0])


def _hf_logits(hf_model, ids):
  with torch.no_grad():
    return hf_model(torch.tensor([ids])).logits[0].numpy()


def test_tiny_llama_logits_match_transformers(tiny_llama):
  directory, hf_model = tiny_llama
  assert os.path.isfile(os.path.join(directory, "model.safetensors.index.json"))  # sharded
  model = load_model(directory)
  config = model.config
  assert (config.n_heads, config.n_kv_heads, config.tie_embeddings, config.qkv_bias) == (4, 2, False, False)
  assert config.rope_scaling == (4.0, 1.0, 4.0, 64.0)
  assert config.eos_token_ids == (2, 3) and config.bos_token_id == 1
  np.testing.assert_allclose(_all_logits(model, IDS), _hf_logits(hf_model, IDS), atol=1e-4, rtol=0)


def test_tiny_qwen2_logits_match_transformers(tiny_qwen2):
  directory, hf_model = tiny_qwen2
  model = load_model(directory)
  assert model.config.qkv_bias and model.config.tie_embeddings
  assert model.config.rope_theta == 1e6 and model.config.eos_token_ids == (5,)
  np.testing.assert_allclose(_all_logits(model, IDS), _hf_logits(hf_model, IDS), atol=1e-4, rtol=0)


def test_bfloat16_checkpoint_loads_as_bfloat16(tiny_llama, tmp_path):
  _, hf_model = tiny_llama
  copy.deepcopy(hf_model).to(torch.bfloat16).save_pretrained(tmp_path)
  model = load_model(tmp_path)
  assert model.config.dtype == "bfloat16"
  assert str(model.flat_params()["layers.0.attn.q.kernel"].dtype) == "bfloat16"
  assert load_model(tmp_path, dtype="float32").config.dtype == "float32"


def _edited_copy(directory, tmp_path, **changes):
  target = tmp_path / "edited"
  shutil.copytree(directory, target)
  with open(target / "config.json") as f:
    config = json.load(f)
  config.update(changes)
  with open(target / "config.json", "w") as f:
    json.dump(config, f)
  return target


def test_unsupported_architecture_is_named(tiny_llama, tmp_path):
  edited = _edited_copy(tiny_llama[0], tmp_path, architectures=["GPT2LMHeadModel"])
  with pytest.raises(ValueError, match="GPT2LMHeadModel"):
    load_model(edited)


def test_unsupported_rope_scaling_is_named(tiny_llama, tmp_path):
  edited = _edited_copy(tiny_llama[0], tmp_path,
                        rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0})
  with pytest.raises(ValueError, match="yarn"):
    load_model(edited)


def test_output_projection_bias_is_refused(tiny_llama, tmp_path):
  edited = _edited_copy(tiny_llama[0], tmp_path, attention_bias=True)
  with pytest.raises(ValueError, match="attention_bias"):
    load_model(edited)


def test_missing_weights_are_named(tiny_llama, tmp_path):
  target = tmp_path / "copy"
  shutil.copytree(tiny_llama[0], target)
  os.remove(target / "model-00003-of-00003.safetensors")
  with pytest.raises(FileNotFoundError, match="model-00003-of-00003"):
    load_model(target)


BASE = {"architectures": ["MistralForCausalLM"], "vocab_size": 32, "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 32768}


def test_transformers4_style_rope_keys():
  config = hf_config({**BASE, "architectures": ["LlamaForCausalLM"], "rope_theta": 500000.0,
                      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})
  assert config.rope_theta == 500000.0 and config.rope_scaling == (8.0, 1.0, 4.0, 8192.0)


def test_sliding_window_caps_max_seq_len():
  assert hf_config({**BASE, "sliding_window": 4096}).max_seq_len == 4096
  assert hf_config({**BASE, "sliding_window": None}).max_seq_len == 32768
  qwen = {**BASE, "architectures": ["Qwen2ForCausalLM"], "sliding_window": 4096}
  assert hf_config({**qwen, "use_sliding_window": False}).max_seq_len == 32768


def test_generation_config_adds_eos_ids():
  config = hf_config({**BASE, "eos_token_id": 2}, {"eos_token_id": [2, 7]})
  assert config.eos_token_ids == (2, 7)
