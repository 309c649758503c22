"""Hugging Face model directories: `config.json` plus `*.safetensors` (one file or sharded with an index)."""

import json
import os
import re

import numpy as np
from safetensors import safe_open

from specjax.config import SUPPORTED_DTYPES, ModelConfig
from specjax.model import Model, model_from_flat_params
from specjax.tokenizer import TOKENIZER_FILE, Tokenizer

# config.json `architectures` -> the specjax model family it loads into (the tensor names below are its names).
ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "llama"}
INDEX_FILE = "model.safetensors.index.json"

_LAYER_NAME = re.compile(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)")
_LAYER_PARTS = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "mlp_norm",
    "self_attn.q_proj": "attn.q", "self_attn.k_proj": "attn.k", "self_attn.v_proj": "attn.v",
    "self_attn.o_proj": "attn.o", "mlp.gate_proj": "mlp.gate", "mlp.up_proj": "mlp.up", "mlp.down_proj": "mlp.down",
}


def _read_json(path: str) -> dict:
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except json.JSONDecodeError as err:
    raise ValueError(f"{path} is not valid JSON: {err}") from err


def _rope(hf: dict, where: str) -> tuple[float, tuple]:
  """(rope_theta, specjax rope_scaling tuple) from `rope_parameters` (transformers 5) or `rope_theta`/`rope_scaling`."""
  params = dict(hf.get("rope_parameters") or {})
  scaling = hf.get("rope_scaling") or params
  theta = float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
  kind = scaling.get("rope_type", scaling.get("type", "default"))
  if kind == "default":
    return theta, ()
  if kind == "llama3":
    return theta, (float(scaling["factor"]), float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"]),
                   float(scaling["original_max_position_embeddings"]))
  raise ValueError(f"{where}: RoPE scaling type {kind!r} is not supported (supported: default, llama3)")


def _max_len(hf: dict, arch: str) -> int:
  """max_position_embeddings, capped at the sliding window when the model uses one (within it, full causal
  attention is exact; beyond it the model would need windowed attention, which specjax does not implement)."""
  max_len = int(hf.get("max_position_embeddings", 2048))
  window = hf.get("sliding_window")
  uses_window = window is not None and (arch == "MistralForCausalLM" or (
      hf.get("use_sliding_window", False) and "sliding_attention" in hf.get("layer_types", ["sliding_attention"])))
  return min(max_len, int(window)) if uses_window else max_len


def _eos_ids(*values) -> tuple[int, ...]:
  ids = []
  for value in values:
    ids += [value] if isinstance(value, int) else list(value or ())
  return tuple(dict.fromkeys(int(i) for i in ids))


def hf_config(hf: dict, generation: dict | None = None, where: str = "config.json") -> ModelConfig:
  """ModelConfig from a parsed `config.json` (and `generation_config.json` for extra EOS ids)."""
  archs = hf.get("architectures") or []
  arch = archs[0] if archs else {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                                 "qwen2": "Qwen2ForCausalLM"}.get(hf.get("model_type"), repr(hf.get("model_type")))
  if arch not in ARCHITECTURES:
    raise ValueError(f"{where}: architecture {arch} is not supported (supported: {', '.join(ARCHITECTURES)})")
  if hf.get("hidden_act", "silu") != "silu":
    raise ValueError(f"{where}: activation {hf['hidden_act']!r} is not supported (only silu)")
  if hf.get("mlp_bias"):
    raise ValueError(f"{where}: mlp_bias=True is not supported")
  if arch != "Qwen2ForCausalLM" and hf.get("attention_bias"):
    raise ValueError(f"{where}: attention_bias=True (bias on the output projection too) is not supported")
  theta, scaling = _rope(hf, where)
  n_heads = int(hf["num_attention_heads"])
  d_model = int(hf["hidden_size"])
  head_dim = int(hf.get("head_dim") or d_model // n_heads)
  dtype = hf.get("dtype") or hf.get("torch_dtype") or "float32"
  vocab_size = int(hf["vocab_size"])
  eos = _eos_ids(hf.get("eos_token_id"), (generation or {}).get("eos_token_id"))
  bos = hf.get("bos_token_id")
  return ModelConfig(
      vocab_size=vocab_size,
      d_model=d_model,
      n_layers=int(hf["num_hidden_layers"]),
      n_heads=n_heads,
      n_kv_heads=int(hf.get("num_key_value_heads") or n_heads),
      ffn_dim=int(hf["intermediate_size"]),
      max_seq_len=_max_len(hf, arch),
      rope_theta=theta,
      norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
      tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
      qkv_bias=arch == "Qwen2ForCausalLM",
      dtype=dtype if dtype in SUPPORTED_DTYPES else "float32",
      head_dim=0 if head_dim * n_heads == d_model else head_dim,
      rope_scaling=scaling,
      eos_token_ids=tuple(t for t in eos if 0 <= t < vocab_size),
      bos_token_id=-1 if bos is None else int(bos),
      family=ARCHITECTURES[arch],
  )


def _rename(name: str, config: ModelConfig) -> tuple[str | None, bool]:
  """(specjax name or None to skip, whether to transpose) for one HF tensor name."""
  if name == "model.embed_tokens.weight":
    return "embed", False
  if name == "model.norm.weight":
    return "final_norm.scale", False
  if name == "lm_head.weight":
    return (None, False) if config.tie_embeddings else ("head.kernel", True)
  if name.endswith("rotary_emb.inv_freq"):
    return None, False
  match = _LAYER_NAME.fullmatch(name)
  if not match or match.group(2) not in _LAYER_PARTS:
    raise ValueError(f"unexpected tensor {name}")
  layer, part, kind = match.groups()
  target = f"layers.{layer}.{_LAYER_PARTS[part]}"
  if part.endswith("layernorm"):
    return f"{target}.scale", False
  return (f"{target}.kernel", True) if kind == "weight" else (f"{target}.bias", False)


def safetensors_files(directory: str) -> list[str]:
  """The weight files of a directory: those its index names, else every `*.safetensors`."""
  index = os.path.join(directory, INDEX_FILE)
  if os.path.isfile(index):
    names = sorted(set(_read_json(index)["weight_map"].values()))
  else:
    names = sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))
  if not names:
    raise FileNotFoundError(f"no *.safetensors weights in {directory}")
  paths = [os.path.join(directory, n) for n in names]
  for path in paths:
    if not os.path.isfile(path):
      raise FileNotFoundError(f"{index} names {path}, which does not exist")
  return paths


def read_hf_params(directory: str, config: ModelConfig) -> dict[str, np.ndarray]:
  """{specjax name: numpy array} from the directory's safetensors, kernels transposed to [in, out]."""
  flat = {}
  for path in safetensors_files(directory):
    try:
      with safe_open(path, framework="np") as f:
        for name in f.keys():
          try:
            key, transpose = _rename(name, config)
          except ValueError as err:
            raise ValueError(f"{path}: {err}") from err
          if key is not None:
            values = f.get_tensor(name)
            flat[key] = values.T if transpose else values
    except ValueError:
      raise
    except Exception as err:  # safetensors raises its own error types on corrupt headers
      raise ValueError(f"{path} is not a readable safetensors file: {err}") from err
  return flat


def read_hf_config(directory: str) -> ModelConfig:
  path = os.path.join(directory, "config.json")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"no config.json in {directory}")
  generation_path = os.path.join(directory, "generation_config.json")
  generation = _read_json(generation_path) if os.path.isfile(generation_path) else None
  return hf_config(_read_json(path), generation, where=path)


def load_hf(directory: str | os.PathLike, dtype: str | None = None) -> Model:
  """A Model (with tokenizer if `tokenizer.json` is present) from a Hugging Face style directory."""
  directory = os.fspath(directory)
  config = read_hf_config(directory)
  if dtype is not None:
    config = config.replace(dtype=dtype)
  flat = read_hf_params(directory, config)
  tokenizer = Tokenizer.load(directory) if os.path.isfile(os.path.join(directory, TOKENIZER_FILE)) else None
  return model_from_flat_params(config, flat, tokenizer=tokenizer, source=directory)
