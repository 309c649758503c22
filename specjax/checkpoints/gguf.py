"""llama.cpp GGUF files: config from the metadata, every tensor dequantized and renamed to specjax's tree; or, for
`weights="q4"`, the file's Q4_0 / Q4_1 / Q8_0 matrices kept as their blocks (`specjax.quantize.from_gguf_blocks`).

llama.cpp stores the Q and K projections of `llama` models with each head's rows interleaved for its
rotate-pairs RoPE; `unpermute_rows` restores the half-split order that HF transformers and specjax use.
"""

import dataclasses
import os
import re
import warnings
from typing import Any

import gguf
import numpy as np

from specjax.config import ModelConfig
from specjax.kernels.qweight import QuantizedWeight
from specjax.model import Model, model_from_flat_params
from specjax.models.rope import inverse_frequencies
from specjax.quantize import check_weights, from_gguf_blocks, quantize_model, quantized_model
from specjax.tokenizer import Tokenizer

# general.architecture -> (the specjax model family it loads into, whether llama.cpp permuted the Q/K rows).
ARCHITECTURES = {"llama": ("llama", True), "qwen2": ("llama", False)}

_LAYER_TENSORS = {
    "attn_q": "attn.q", "attn_k": "attn.k", "attn_v": "attn.v", "attn_output": "attn.o",
    "ffn_gate": "mlp.gate", "ffn_up": "mlp.up", "ffn_down": "mlp.down",
    "attn_norm": "attn_norm", "ffn_norm": "mlp_norm",
}
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
# GGUF block types that `weights="q4"` keeps as they are, and the float types it quantizes to q4_1 itself.
KEPT_TYPES = {gguf.GGMLQuantizationType.Q8_0: "q8_0", gguf.GGMLQuantizationType.Q4_0: "q4_0",
              gguf.GGMLQuantizationType.Q4_1: "q4_1"}
_FLOAT_TYPES = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16)


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


def _kept(tensor, path: str):
  """A matrix's blocks as a QuantizedWeight [rows, K] (no requantization), or None for a float tensor (a 1-D norm or
  bias, or a float matrix); a quantized matrix of another type is a ValueError saying what to use."""
  if len(tensor.shape) != 2 or tensor.tensor_type in _FLOAT_TYPES:
    return None
  if tensor.tensor_type not in KEPT_TYPES:
    raise ValueError(f"{path}: GGUF tensor {tensor.name} is {tensor.tensor_type.name}, which weights=\"q4\" cannot "
                     f"keep quantized (only {', '.join(t.name for t in KEPT_TYPES)} blocks are kept); load it with "
                     f"weights=\"int8\" (requantized from its dequantized floats) or \"float\", or use a Q4_0 / "
                     f"Q4_1 / Q8_0 GGUF file")
  return from_gguf_blocks(tensor.data, KEPT_TYPES[tensor.tensor_type], tensor.name)


def _unpermute(values, n_heads: int):
  if isinstance(values, QuantizedWeight):  # whole rows: q, scale and minimum alike
    rows = {f: unpermute_rows(np.asarray(getattr(values, f)), n_heads) for f in ("q", "scale", "minimum")
            if np.ndim(getattr(values, f)) == 2}
    return dataclasses.replace(values, **rows)
  return unpermute_rows(values, n_heads)


def _rename(name: str, config: ModelConfig, permuted: bool, values) -> tuple[str, Any]:
  """specjax name and array for one GGUF tensor (kernels transposed to [in, out]); a QuantizedWeight W [N, K]
  (kept blocks) is named by its module (`head`, `layers.0.attn.q`) and stays [N, K]."""
  kept = isinstance(values, QuantizedWeight)
  if name == "token_embd.weight":
    return "embed", values
  if name == "output_norm.weight":
    return "final_norm.scale", values
  if name == "output.weight":
    return ("head", values) if kept else ("head.kernel", values.T)
  match = _LAYER_NAME.fullmatch(name)
  if not match or match.group(2) not in _LAYER_TENSORS:
    raise ValueError(f"unexpected GGUF tensor {name}")
  layer, part, kind = match.groups()
  target = f"layers.{layer}.{_LAYER_TENSORS[part]}"
  if part in ("attn_norm", "ffn_norm"):
    return f"{target}.scale", values
  if permuted and part in ("attn_q", "attn_k"):
    values = _unpermute(values, config.n_heads if part == "attn_q" else config.n_kv_heads)
  if kind == "bias":
    return f"{target}.bias", values
  return (target, values) if kept else (f"{target}.kernel", values.T)


def read_gguf(path: str | os.PathLike, keep_quantized: bool = False) -> tuple[ModelConfig, dict[str, Any], dict]:
  """(config, {specjax name: float32 array}, metadata) of a GGUF file. With `keep_quantized`, the Q4_0 / Q4_1 /
  Q8_0 matrices are QuantizedWeights named by their module (`_rename`); every tensor is checked before any is read."""
  path = os.fspath(path)
  reader = open_gguf(path)
  metadata = read_metadata(reader)
  shapes = {t.name: tuple(reversed([int(d) for d in t.shape])) for t in reader.tensors}
  config = gguf_config(metadata, shapes, path)
  permuted = ARCHITECTURES[metadata["general.architecture"]][1]
  kept = {t.name: _kept(t, path) for t in reader.tensors} if keep_quantized else {}
  flat = {}
  for tensor in reader.tensors:
    values = kept[tensor.name] if kept.get(tensor.name) is not None else _dequantize(tensor)
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


def load_gguf(path: str | os.PathLike, dtype: str | None = None, weights: str = "float") -> Model:
  """A Model (with its tokenizer, when the file describes a supported one) from a GGUF file. `weights`: "float"
  (every tensor dequantized), "q4" (the file's Q4_0 / Q4_1 / Q8_0 matrices kept as they are, float matrices
  quantized to q4_1, norms float) or "int8" (every linear and the embedding requantized to int8 from floats)."""
  scheme = check_weights(weights)
  config, flat, metadata = read_gguf(path, keep_quantized=weights == "q4")
  if dtype is not None:
    config = config.replace(dtype=dtype)
  tokenizer = None
  if "tokenizer.ggml.tokens" in metadata:
    try:
      tokenizer = Tokenizer.from_gguf_metadata(metadata)
    except ValueError as err:
      warnings.warn(f"{os.fspath(path)}: loading the model without a tokenizer: {err}")
  if weights == "q4":
    return quantized_model(config, flat, scheme, tokenizer=tokenizer, source=os.fspath(path))
  model = model_from_flat_params(config, flat, tokenizer=tokenizer, source=os.fspath(path))
  return model if scheme is None else quantize_model(model, scheme)
