"""Model families: the name in `ModelConfig.family` -> the decoder module and what the rest of specjax needs from
it (sharding rules, how layer parameters are named, the pieces FeatureHead and LayerSkip build from). Everything
outside `specjax/models/` reaches a family's internals only through its entry here."""

import dataclasses
import re
from typing import Callable, NamedTuple

import jax
import numpy as np
from flax import nnx


class ShardRule(NamedTuple):
  """A parameter whose dotted path matches `pattern` (re.search) splits its `axis` (0: rows, -1: columns) over the
  mesh's "model" axis when the config's `divides` field is a multiple of that axis's size; else it replicates."""

  pattern: str
  axis: int
  divides: str


@dataclasses.dataclass(frozen=True)
class ModelFamily:
  """One family's entry. The module's interface is in docs/adding_a_model_family.md.

  module:      module(config, rngs) -> the decoder (`__call__`, `hidden_states`, `logits`, `embed`, `layers`, ...)
  block:       block(config, rngs) -> one decoder layer, called as block(x, cos, sin, positions_BxT, cache, layer)
               (FeatureHead's layer)
  norm:        norm(dim, eps, dtype) -> a norm module with a `scale` parameter (FeatureHead, LayerSkip's adapter)
  rope_tables: rope_tables(config, positions_BxT) -> (cos, sin), what every block call takes
  chain_block: chain_block(block, x_BxTxD, cos, sin, keys, values) -> x: one layer without a cache (training of
               draft models and the feature head's training-time test; see llama.chain_block)
  sharding:    rules tried in order; a parameter no rule matches is replicated
  layers:      layer i's parameters are named f"{layers}.{i}.<rest>" (what truncating a model keeps)
  input_norm:  the <rest> of the norm scale through which a layer reads the residual stream
  final_norm:  the name of the final norm's scale (what reads the last layer's output)
  param_count: param_count(config) -> int without building the module; None: counted from an abstract module
  context_kv:  context_kv(block, x_BxTxD, cos, sin) -> (k, v): the keys and values a layer makes of x without its
               input norm (BlockDrafter's context entries; see llama.context_kv); None: no block drafter
  masked_block: masked_block(block, x_BxTxD, cos, sin, keys, values, visible_BxTxST) -> x: one layer without a
               cache over extra entries and its own, under a mask (BlockDrafter's training; llama.masked_block)
  """

  name: str
  module: type
  block: Callable
  norm: Callable
  rope_tables: Callable
  chain_block: Callable
  sharding: tuple[ShardRule, ...] = ()
  layers: str = "layers"
  input_norm: str = "attn_norm.scale"
  final_norm: str = "final_norm.scale"
  param_count: Callable | None = None
  context_kv: Callable | None = None
  masked_block: Callable | None = None

  def layer_of(self, name: str) -> int | None:
    """The layer index of the parameter at dotted path `name`, or None if it belongs to no layer."""
    match = re.match(rf"{re.escape(self.layers)}\.(\d+)\.", name)
    return int(match.group(1)) if match else None

  def reading_norm(self, layer: int, n_layers: int) -> str:
    """The norm scale that reads the residual stream after `layer`: the next layer's input norm, or the final one."""
    return f"{self.layers}.{layer + 1}.{self.input_norm}" if layer + 1 < n_layers else self.final_norm

  def count_params(self, config) -> int:
    if self.param_count is not None:
      return self.param_count(config)
    abstract = nnx.eval_shape(lambda: self.module(config, rngs=nnx.Rngs(0)))
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(abstract, nnx.Param)))


_FAMILIES: dict[str, ModelFamily] = {}


def register_family(family: ModelFamily) -> ModelFamily:
  """Adds `family` under its name (built-ins in specjax/models/__init__.py; tests may add and remove their own)."""
  if not isinstance(family, ModelFamily):
    raise TypeError(f"register_family expects a ModelFamily, got {type(family).__name__}")
  if _FAMILIES.get(family.name, family) is not family:
    raise ValueError(f"model family {family.name!r} is already registered")
  _FAMILIES[family.name] = family
  return family


def unregister_family(name: str) -> None:
  _FAMILIES.pop(name, None)


def known_families() -> tuple[str, ...]:
  return tuple(_FAMILIES)


def get_family(name: str) -> ModelFamily:
  """The entry of family `name`; an unknown name raises ValueError naming the known ones."""
  family = _FAMILIES.get(name) if isinstance(name, str) else None
  if family is None:
    raise ValueError(f"unknown model family {name!r}; known families: {', '.join(_FAMILIES) or 'none'}")
  return family
