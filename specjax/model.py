"""`Model`: a config, the decoder's parameters (split once from the NNX module) and an optional tokenizer.
The decoder is the module of the config's family (`specjax.models`)."""

import dataclasses
import functools
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.config import ModelConfig
from specjax.models import ModelFamily, get_family


@dataclasses.dataclass(frozen=True, eq=False)
class Model:
  """What `init_model` and `load_model` return; `graphdef` is jit-static, `params` is the array pytree."""

  config: ModelConfig
  graphdef: Any
  params: nnx.State
  tokenizer: Any = None

  def module(self) -> nnx.Module:
    """The NNX module (merge of graphdef and params); call inside or outside jit."""
    return nnx.merge(self.graphdef, self.params)

  def flat_params(self) -> dict[str, jax.Array]:
    """Parameters keyed by dotted path, e.g. `layers.0.attn.q.kernel`."""
    return {_dotted(path): var[...] for path, var in nnx.to_flat_state(self.params)}

  def with_params(self, params: nnx.State) -> "Model":
    return dataclasses.replace(self, params=params)

  def with_tokenizer(self, tokenizer) -> "Model":
    return dataclasses.replace(self, tokenizer=tokenizer)

  @property
  def param_bytes(self) -> int:
    return sum(int(np.prod(x.shape)) * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(self.params))


def _dotted(path) -> str:
  return ".".join(str(p) for p in path)


def init_model(config: ModelConfig, seed: int = 0) -> Model:
  """A model with random parameters (for tests, benchmarks of shape, and training from scratch)."""
  if not isinstance(config, ModelConfig):
    raise TypeError(f"init_model expects a ModelConfig, got {type(config).__name__}")
  module = get_family(config.family).module(config, rngs=nnx.Rngs(seed))
  graphdef, params = nnx.split(module)
  return Model(config=config, graphdef=graphdef, params=params)


def abstract_params(config: ModelConfig) -> tuple[Any, nnx.State]:
  """graphdef and a parameter State of ShapeDtypeStructs, without allocating weights."""
  return _abstract_params(config, get_family(config.family))


@functools.lru_cache(maxsize=16)
def _abstract_params(config: ModelConfig, family: ModelFamily) -> tuple[Any, nnx.State]:
  return nnx.split(nnx.eval_shape(lambda: family.module(config, rngs=nnx.Rngs(0))))


def model_from_flat_params(config: ModelConfig, flat: Mapping[str, Any], tokenizer=None, source: str = "",
                           structure: tuple[Any, nnx.State] | None = None) -> Model:
  """Builds a Model from `{dotted path: array}`; every parameter must be present with the right shape. Arrays take
  the dtype of the abstract parameter (the config's dtype; a quantized weight's own). `structure` is the
  (graphdef, abstract params) to fill, by default the config's family module (`abstract_params`)."""
  graphdef, abstract = structure if structure is not None else abstract_params(config)
  expected = {_dotted(path): var for path, var in nnx.to_flat_state(abstract)}
  missing = sorted(set(expected) - set(flat))
  extra = sorted(set(flat) - set(expected))
  where = f" in {source}" if source else ""
  if missing:
    raise ValueError(f"checkpoint{where} lacks parameters {missing[:6]}{' ...' if len(missing) > 6 else ''}")
  if extra:
    raise ValueError(f"checkpoint{where} has unexpected parameters {extra[:6]}{' ...' if len(extra) > 6 else ''}")
  leaves = []
  for path, var in nnx.to_flat_state(abstract):
    name = _dotted(path)
    array = flat[name]
    if tuple(array.shape) != tuple(var.shape):
      raise ValueError(f"parameter {name}{where} has shape {tuple(array.shape)}, expected {tuple(var.shape)}")
    leaves.append((path, var.replace(jnp.asarray(array, dtype=var.dtype))))
  params = nnx.from_flat_state(leaves)
  return Model(config=config, graphdef=graphdef, params=params, tokenizer=tokenizer)

