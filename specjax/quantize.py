"""Quantized weights: float W [N, K] -> `QuantizedWeight` (int8 per output row; GGUF's q8_0 / q4_0 / q4_1 blocks of
32, by the `gguf` package's own reference quantizers), GGUF block bytes <-> QuantizedWeight without requantizing,
and a `Model` whose linears and embedding hold quantized weights (`quantize_model`, `quantized_model`).

The decoder's linears become `specjax.models.qdense.QDense` by module surgery on the family's abstract module, then
one `nnx.split`: the KV cache, the engine and the drafters see an ordinary Model (another graphdef, other params).
"""

from typing import Any, Mapping

import gguf
import jax
import numpy as np
from flax import nnx

from specjax.config import ModelConfig
from specjax.kernels.qweight import BLOCK, QuantizedWeight, abstract_weight, dequantize
from specjax.model import Model, _dotted, model_from_flat_params
from specjax.models import get_family
from specjax.models.qdense import QDense

# What a caller may name -> the stored scheme ("q4" is GGUF's Q4_1: a scale and a minimum per block of 32).
SCHEME_NAMES = {"int8": "int8", "q4": "q4_1", "q8_0": "q8_0", "q4_0": "q4_0", "q4_1": "q4_1"}
# load_model(weights=...) -> the scheme every float linear and the embedding is quantized to (None: kept float).
WEIGHTS = {"float": None, "int8": "int8", "q4": "q4_1"}
GGUF_TYPES = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0,
              "q4_1": gguf.GGMLQuantizationType.Q4_1}
# A 4-bit model keeps its embedding and head (the tied head's logits decide every draft's acceptance) in 8-bit
# blocks, as llama.cpp's Q4 files keep token_embd: on SmolLM2 a q4_1 head cost the q4 self-draft a fifth of its
# acceptance for 12 MB fewer bytes a step.
HEAD_SCHEMES = {"q4_0": "q8_0", "q4_1": "q8_0"}
HEADS = ("embed", "head")
_F16_FIELDS = {"q8_0": 1, "q4_0": 1, "q4_1": 2}  # float16 fields (d, then m for q4_1) before each block's quants
_QUANT_BYTES = {"q8_0": BLOCK, "q4_0": BLOCK // 2, "q4_1": BLOCK // 2}
_NO_MINIMUM = np.zeros((0,), np.float16)


def scheme_name(scheme) -> str:
  """The stored scheme for a name in SCHEME_NAMES; anything else is a ValueError naming them."""
  if not isinstance(scheme, str) or scheme not in SCHEME_NAMES:
    raise ValueError(f"unknown quantization scheme {scheme!r}; use one of {list(SCHEME_NAMES)}")
  return SCHEME_NAMES[scheme]


def check_weights(weights) -> str | None:
  """The scheme of `load_model(weights=...)` ("float" -> None); a bad value is a ValueError naming the choices."""
  if not isinstance(weights, str) or weights not in WEIGHTS:
    raise ValueError(f"weights must be one of {list(WEIGHTS)}, got {weights!r}")
  return WEIGHTS[weights]


def quantize(w_NxK, scheme: str, name: str = "weight") -> QuantizedWeight:
  """W [N, K] (output rows first) quantized: int8 with one scale per row (max|w| / 127), or GGUF blocks of 32
  (q8_0, q4_0, q4_1) exactly as `gguf.quants.quantize` makes them. numpy arrays out."""
  scheme = scheme_name(scheme)
  w = np.asarray(w_NxK, np.float32)
  if w.ndim != 2:
    raise ValueError(f"cannot quantize {name}: expected a matrix [N, K], got shape {w.shape}")
  check_block_width(w.shape, scheme, name)
  if scheme == "int8":
    return _int8(w, name)
  return from_gguf_blocks(gguf.quants.quantize(w, GGUF_TYPES[scheme]), scheme, name)


def check_block_width(shape: tuple, scheme: str, name: str = "weight") -> None:
  """A block scheme needs K (shape[1] of W [N, K]) to be a multiple of the block; int8 takes any K."""
  if scheme != "int8" and shape[1] % BLOCK:
    raise ValueError(f"cannot quantize {name} of shape {tuple(shape)} to {scheme}: its input width K={shape[1]} is "
                     f"not a multiple of the block size {BLOCK}; use scheme 'int8' (one scale per row)")


def _int8(w: np.ndarray, name: str) -> QuantizedWeight:
  scale = (np.abs(w).max(axis=1, keepdims=True) / 127).astype(np.float16)
  if not np.isfinite(scale).all():
    raise ValueError(f"cannot quantize {name} to int8: it has values that are not finite or beyond float16 scales")
  s = scale.astype(np.float32)
  with np.errstate(divide="ignore", invalid="ignore"):
    q = np.where(s > 0, np.rint(w / s), 0.0)
  return QuantizedWeight(q=np.clip(q, -127, 127).astype(np.int8), scale=scale, minimum=_NO_MINIMUM, scheme="int8")


def from_gguf_blocks(raw_NxB, scheme: str, name: str = "weight") -> QuantizedWeight:
  """GGUF blocks (uint8 [N, bytes per row], `reader.tensors[i].data`) split into a QuantizedWeight, bit for bit:
  q8_0 = f16 d + 32 int8; q4_0 = f16 d + 16 nibble bytes; q4_1 = f16 d + f16 m + 16 nibble bytes."""
  scheme = scheme_name(scheme)
  if scheme not in GGUF_TYPES:
    raise ValueError(f"{name}: {scheme} is not a GGUF block scheme; use one of {list(GGUF_TYPES)}")
  raw = np.ascontiguousarray(raw_NxB).view(np.uint8)
  fields, size = _F16_FIELDS[scheme], 2 * _F16_FIELDS[scheme] + _QUANT_BYTES[scheme]
  if raw.ndim != 2 or raw.shape[1] % size:
    raise ValueError(f"{name}: {scheme} blocks of {size} bytes do not divide a tensor of byte shape {raw.shape}")
  rows = raw.shape[0]
  blocks = raw.reshape(rows, -1, size)
  f16 = [np.ascontiguousarray(blocks[..., 2 * i:2 * i + 2]).view(np.float16).reshape(rows, -1) for i in range(fields)]
  q = np.ascontiguousarray(blocks[..., 2 * fields:]).reshape(rows, -1)
  return QuantizedWeight(q=q.view(np.int8) if scheme == "q8_0" else q, scale=f16[0],
                         minimum=f16[1] if scheme == "q4_1" else _NO_MINIMUM, scheme=scheme)


def to_gguf_blocks(w: QuantizedWeight) -> np.ndarray:
  """The inverse of `from_gguf_blocks`: uint8 [N, bytes per row] in GGUF's block layout."""
  if w.scheme not in GGUF_TYPES:
    raise ValueError(f"{w.scheme} weights have no GGUF block layout; use one of {list(GGUF_TYPES)}")
  rows, blocks = np.asarray(w.scale).shape
  fields = [w.scale] + ([w.minimum] if w.scheme == "q4_1" else [])
  parts = [np.ascontiguousarray(np.asarray(f, np.float16)[..., None]).view(np.uint8) for f in fields]
  parts.append(np.asarray(w.q).view(np.uint8).reshape(rows, blocks, -1))
  return np.concatenate(parts, axis=-1).reshape(rows, -1)


# ---- models on quantized weights -----------------------------------------------------------------------------


def _linears(module) -> dict[str, nnx.Module]:
  """Every linear of the decoder by dotted path: a module whose `kernel` is a 2-D [in, out] parameter."""
  return {_dotted(path): m for path, m in nnx.iter_modules(module)
          if isinstance(getattr(m, "kernel", None), nnx.Param) and len(m.kernel.shape) == 2}


def _child(module, part: str):
  return module[int(part)] if part.isdigit() else getattr(module, part)


def _swap(module, name: str, new) -> None:
  """Replaces the submodule or parameter at dotted path `name` with `new`."""
  *parents, last = name.split(".")
  for part in parents:
    module = _child(module, part)
  if last.isdigit():
    module[int(last)] = new
  else:
    setattr(module, last, new)


def _abstract(w: QuantizedWeight) -> QuantizedWeight:
  return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), w)


def _check_shape(w: QuantizedWeight, expected: tuple, name: str, where: str) -> None:
  if not isinstance(w, QuantizedWeight):
    raise TypeError(f"{name}{where}: expected a QuantizedWeight, got {type(w).__name__}")
  if tuple(w.shape) != tuple(expected):
    raise ValueError(f"quantized weight {name}{where} has shape {tuple(w.shape)}, expected {tuple(expected)}")


def weight_scheme(scheme: str, name: str) -> str:
  """The scheme a model quantized to `scheme` stores its weight `name` (a dotted module path) in: `scheme`, except
  the embedding and head of a 4-bit model (HEAD_SCHEMES)."""
  return HEAD_SCHEMES.get(scheme, scheme) if name in HEADS else scheme


def quantized_model(config: ModelConfig, flat: Mapping[str, Any], scheme: str, tokenizer=None,
                    source: str = "") -> Model:
  """A Model whose linears and embedding hold QuantizedWeights, each with its own scheme.

  `flat` maps dotted parameter paths to float arrays (as `model_from_flat_params` takes them), except that a linear
  (`layers.0.attn.q`, `head`) or the embedding (`embed`) may instead map its module path to a QuantizedWeight
  W [N, K], kept as it is; every linear and embedding given as floats is quantized to `scheme` (the embedding and
  head of a 4-bit model to 8-bit blocks: `weight_scheme`)."""
  scheme = scheme_name(scheme)
  where = f" in {source}" if source else ""
  module = _abstract_module(config)
  flat = dict(flat)
  targets = _weight_shapes(module)
  keys = {name: name if name == "embed" else f"{name}.kernel" for name in targets}
  for name, expected in targets.items():  # every check before the first quantization
    if isinstance(flat.get(name), QuantizedWeight):
      _check_shape(flat[name], expected, name, where)
    elif keys[name] not in flat:
      raise ValueError(f"checkpoint{where} lacks parameter {keys[name]}")
    else:
      check_block_width(expected, weight_scheme(scheme, name), name)
  weights = {}
  for name in targets:
    if isinstance(flat.get(name), QuantizedWeight):
      weights[name] = flat.pop(name)
    else:
      matrix = np.asarray(flat.pop(keys[name]), np.float32)
      weights[name] = quantize(matrix if name == "embed" else matrix.T, weight_scheme(scheme, name), name)
      _check_shape(weights[name], targets[name], name, where)
  for name, w in weights.items():
    flat.update({f"{name}.{field}": getattr(w, field) for field in QDense.fields(w.scheme)})
  structure = _quantized_structure(module, {name: _abstract(w) for name, w in weights.items()})
  return model_from_flat_params(config, flat, tokenizer=tokenizer, source=source, structure=structure)


def abstract_quantized_params(config: ModelConfig, scheme: str):
  """(graphdef, params as ShapeDtypeStructs) of `config`'s model with every linear and the embedding held as
  `scheme` weights (norms and biases float), nothing allocated: what an AOT compile of a quantized draft lowers."""
  scheme = scheme_name(scheme)
  module = _abstract_module(config)
  shapes = _weight_shapes(module)
  schemes = {name: weight_scheme(scheme, name) for name in shapes}
  for name, shape in shapes.items():
    check_block_width(shape, schemes[name], name)
  return _quantized_structure(module, {name: abstract_weight(shape, schemes[name]) for name, shape in shapes.items()})


def _abstract_module(config: ModelConfig):
  return nnx.eval_shape(lambda: get_family(config.family).module(config, rngs=nnx.Rngs(0)))


def _weight_shapes(module) -> dict[str, tuple[int, int]]:
  """W [N, K] of every linear (its kernel [K, N] transposed) and of the embedding [V, D], by dotted path."""
  shapes = {name: tuple(reversed(m.kernel.shape)) for name, m in _linears(module).items()}
  shapes["embed"] = tuple(module.embed.shape)
  return shapes


def _quantized_structure(module, weights: Mapping[str, QuantizedWeight]):
  """nnx.split of the abstract `module` with the linears and embedding named in `weights` (abstract
  QuantizedWeights) swapped for QDense modules, each keeping its bias."""
  linears = _linears(module)
  for name, w in weights.items():
    _swap(module, name, QDense(w, getattr(linears.get(name), "bias", None)))
  return nnx.split(module)


def float_flat_params(model: Model) -> dict[str, Any]:
  """`model.flat_params()` with every quantized linear and embedding dequantized back to its float parameter
  (`.kernel` [in, out], `embed` [V, D]): what a float Model of the same config takes."""
  flat = model.flat_params()
  for path, m in nnx.iter_modules(model.module()):
    if isinstance(m, QDense):
      name = _dotted(path)
      for field in QDense.fields(m.scheme):
        del flat[f"{name}.{field}"]
      w = dequantize(m.weight).astype(model.config.dtype)
      flat.update({"embed": w} if name == "embed" else {f"{name}.kernel": w.T})
  return flat


def is_quantized(model: Model) -> bool:
  return any(isinstance(m, QDense) for _, m in nnx.iter_modules(model.module()))


def quantize_model(model: Model, scheme: str) -> Model:
  """`model` with every linear and the embedding (so a tied head too) quantized to `scheme` ("int8", "q4" = q4_1,
  "q8_0", "q4_0", "q4_1"; a 4-bit model's embedding and head to q8_0); an already quantized model is dequantized
  first. Norms and biases stay float."""
  if not isinstance(model, Model):
    raise TypeError(f"quantize_model expects a specjax Model, got {type(model).__name__}")
  scheme = scheme_name(scheme)
  flat = float_flat_params(model) if is_quantized(model) else model.flat_params()
  return quantized_model(model.config, flat, scheme, tokenizer=model.tokenizer, source=f"{scheme} quantization")


def weight_schemes(model: Model) -> dict[str, str]:
  """{module path: scheme} of a model's quantized weights (empty for a float model)."""
  return {_dotted(p): m.scheme for p, m in nnx.iter_modules(model.module()) if isinstance(m, QDense)}

