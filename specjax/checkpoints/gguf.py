"""llama.cpp GGUF files: config from the metadata, every tensor dequantized and renamed to specjax's tree.

llama.cpp stores the Q and K projections of `llama` models with each head's rows interleaved for its
rotate-pairs RoPE; `unpermute_rows` restores the half-split order that HF transformers and specjax use.
"""

import os
import re
import warnings
from typing import Any

import gguf
import numpy as np

from specjax.config import ModelConfig
from specjax.model import Model, model_from_flat_params
from specjax.models.rope import inverse_frequencies
from specjax.tokenizer import Tokenizer

# general.architecture -> (the specjax model family it loads into, whether llama.cpp permuted the Q/K rows).
ARCHITECTURES = {"llama": ("llama", True), "qwen2": ("llama", False)}

_LAYER_TENSORS = {
    "attn_q": "attn.q", "attn_k": "attn.k", "attn_v": "attn.v", "attn_output": "attn.o",
    "ffn_gate": "mlp.gate", "ffn_up": "mlp.up", "ffn_down": "mlp.down",
    "attn_norm": "attn_norm", "ffn_norm": "mlp_norm",
}
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


class _Reader(gguf.GGUFReader):
  """GGUFReader over a plain ndarray view of the memory map: slicing a `np.memmap` subclass is ~2x slower,
  which dominates parsing the ~100k vocabulary strings."""

  def _get(self, offset, dtype, count=1, override_order=None):
    if isinstance(self.data, np.memmap):
      self.data = self.data.view(np.ndarray)
    return super()._get(offset, dtype, count, override_order)


def open_gguf(path: str | os.PathLike) -> gguf.GGUFReader:
  """A reader for `path`; a truncated or corrupt file raises ValueError naming it."""
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"GGUF file not found: {path}")
  try:
    reader = _Reader(path) if hasattr(gguf.GGUFReader, "_get") else gguf.GGUFReader(path)
  except Exception as err:  # the reader fails with assorted errors on bad bytes
    raise ValueError(
        f"{path} is not a readable GGUF file (truncated or corrupt?): {type(err).__name__}: {err}") from err
  size = os.path.getsize(path)
  for tensor in reader.tensors:
    if tensor.data_offset + tensor.n_bytes > size:
      raise ValueError(f"{path} is truncated: tensor {tensor.name} ends at byte "
                       f"{tensor.data_offset + tensor.n_bytes}, the file has {size}")
  return reader


def read_metadata(reader: gguf.GGUFReader) -> dict[str, Any]:
  """Every metadata key as a Python value (strings decoded, arrays as lists)."""
  metadata = {}
  for key, field in reader.fields.items():
    try:
      metadata[key] = field.contents()
    except Exception as err:
      raise ValueError(f"GGUF metadata field {key} cannot be read: {err}") from err
  return metadata


def unpermute_rows(w_RxC: np.ndarray, n_heads: int) -> np.ndarray:
  """Inverse of llama.cpp's `permute`: per head, rows (pairs, 2) -> (2, pairs). Works on weights and biases."""
  rows = w_RxC.shape[0]
  if rows % (2 * n_heads):
    raise ValueError(f"cannot unpermute {rows} rows into {n_heads} heads")
  w = w_RxC.reshape(n_heads, rows // n_heads // 2, 2, *w_RxC.shape[1:])
  return w.swapaxes(1, 2).reshape(w_RxC.shape)


def _llama3_rope_scaling(rope_freqs: np.ndarray, partial: ModelConfig, original_len: int) -> tuple:
  """llama.cpp stores Llama-3 RoPE scaling as per-frequency divisors; recover specjax's tuple from them."""
  factor = float(np.max(rope_freqs))
  candidate = (factor, 1.0, 4.0, float(original_len))
  expected = inverse_frequencies(partial) / inverse_frequencies(partial.replace(rope_scaling=candidate))
  if rope_freqs.shape != expected.shape or not np.allclose(rope_freqs, expected, rtol=1e-3):
    raise ValueError("GGUF rope_freqs tensor does not match Llama-3 RoPE scaling; this RoPE variant is not supported")
  return candidate


def gguf_config(metadata: dict[str, Any], shapes: dict[str, tuple], path: str = "") -> ModelConfig:
  """ModelConfig from GGUF metadata; `shapes` maps tensor names to numpy-order shapes (rows first)."""
  where = path or "GGUF file"
  arch = metadata.get("general.architecture")
  if arch not in ARCHITECTURES:
    raise ValueError(f"{where}: GGUF architecture {arch!r} is not supported (supported: {sorted(ARCHITECTURES)})")

  def get(key, default=None, required=False):
    value = metadata.get(f"{arch}.{key}", default)
    if required and value is None:
      raise ValueError(f"{where}: GGUF metadata lacks {arch}.{key}")
    return value

  n_heads = int(get("attention.head_count", required=True))
  n_kv_heads = get("attention.head_count_kv", n_heads)
  if isinstance(n_kv_heads, list):
    if len(set(n_kv_heads)) != 1:
      raise ValueError(f"{where}: per-layer KV head counts {sorted(set(n_kv_heads))} are not supported")
    n_kv_heads = n_kv_heads[0]
  d_model = int(get("embedding_length", required=True))
  head_dim = int(get("attention.key_length", d_model // n_heads))
  if int(get("attention.value_length", head_dim)) != head_dim:
    raise ValueError(f"{where}: different key and value head widths are not supported")
  if int(get("rope.dimension_count", head_dim)) != head_dim:
    raise ValueError(f"{where}: partial rotary embeddings (rope.dimension_count != head width) are not supported")
  scaling_type = get("rope.scaling.type", "none")
  if scaling_type not in ("none", None):
    raise ValueError(f"{where}: RoPE scaling type {scaling_type!r} is not supported")
  if "token_embd.weight" not in shapes:
    raise ValueError(f"{where}: no token_embd.weight tensor")
  eos = [metadata.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
  vocab_size = int(shapes["token_embd.weight"][0])
  return ModelConfig(
      vocab_size=vocab_size,
      d_model=d_model,
      n_layers=int(get("block_count", required=True)),
      n_heads=n_heads,
      n_kv_heads=int(n_kv_heads),
      ffn_dim=int(get("feed_forward_length", required=True)),
      max_seq_len=int(get("context_length", required=True)),
      rope_theta=float(get("rope.freq_base", 10000.0)),
      norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
      tie_embeddings="output.weight" not in shapes,
      qkv_bias="blk.0.attn_q.bias" in shapes,
      head_dim=0 if head_dim * n_heads == d_model else head_dim,
      eos_token_ids=tuple(dict.fromkeys(int(t) for t in eos if t is not None and 0 <= t < vocab_size)),
      bos_token_id=int(metadata.get("tokenizer.ggml.bos_token_id", -1)),
      family=ARCHITECTURES[arch][0],
  )


def _dequantize(tensor) -> np.ndarray:
  try:
    values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
  except NotImplementedError as err:
    raise ValueError(f"GGUF tensor {tensor.name} uses {tensor.tensor_type.name}, which cannot be dequantized: {err}")
  return values.reshape(tuple(reversed([int(d) for d in tensor.shape])))


def _rename(name: str, config: ModelConfig, permuted: bool, values: np.ndarray) -> tuple[str, np.ndarray]:
  """specjax name and array for one GGUF tensor (kernels transposed to [in, out])."""
  if name == "token_embd.weight":
    return "embed", values
  if name == "output_norm.weight":
    return "final_norm.scale", values
  if name == "output.weight":
    return "head.kernel", values.T
  match = _LAYER_NAME.fullmatch(name)
  if not match or match.group(2) not in _LAYER_TENSORS:
    raise ValueError(f"unexpected GGUF tensor {name}")
  layer, part, kind = match.groups()
  target = f"layers.{layer}.{_LAYER_TENSORS[part]}"
  if part in ("attn_norm", "ffn_norm"):
    return f"{target}.scale", values
  if permuted and part in ("attn_q", "attn_k"):
    values = unpermute_rows(values, config.n_heads if part == "attn_q" else config.n_kv_heads)
  return (f"{target}.kernel", values.T) if kind == "weight" else (f"{target}.bias", values)


def read_gguf(path: str | os.PathLike) -> tuple[ModelConfig, dict[str, np.ndarray], dict[str, Any]]:
  """(config, {specjax name: float32 array}, metadata) of a GGUF file."""
  path = os.fspath(path)
  reader = open_gguf(path)
  metadata = read_metadata(reader)
  shapes = {t.name: tuple(reversed([int(d) for d in t.shape])) for t in reader.tensors}
  config = gguf_config(metadata, shapes, path)
  permuted = ARCHITECTURES[metadata["general.architecture"]][1]
  flat = {}
  for tensor in reader.tensors:
    values = _dequantize(tensor)
    if tensor.name == "rope_freqs.weight":
      original = metadata.get(f"{metadata['general.architecture']}.rope.scaling.original_context_length", 8192)
      config = config.replace(rope_scaling=_llama3_rope_scaling(values, config, original))
      continue
    try:
      key, values = _rename(tensor.name, config, permuted, values)
    except ValueError as err:
      raise ValueError(f"{path}: {err}") from err
    flat[key] = values
  return config, flat, metadata


def load_gguf(path: str | os.PathLike, dtype: str | None = None) -> Model:
  """A Model (with its tokenizer, when the file describes a supported one) from a GGUF file."""
  config, flat, metadata = read_gguf(path)
  if dtype is not None:
    config = config.replace(dtype=dtype)
  tokenizer = None
  if "tokenizer.ggml.tokens" in metadata:
    try:
      tokenizer = Tokenizer.from_gguf_metadata(metadata)
    except ValueError as err:
      warnings.warn(f"{os.fspath(path)}: loading the model without a tokenizer: {err}")
  return model_from_flat_params(config, flat, tokenizer=tokenizer, source=os.fspath(path))
