"""Mesh creation and the rules that place parameters, caches and batches on a ("data", "model") mesh.

Tensor parallelism (Megatron style) over "model": q/k/v and gate/up are split by output columns,
o and down by input rows (one all-reduce each), embedding and head by vocabulary. A dimension is
split only where it divides evenly (heads stay whole); otherwise that parameter is replicated.
The batch is split over "data". Draft models follow the same rules.
"""

import functools
import re

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from specjax.cache import KVCache
from specjax.config import ModelConfig
from specjax.model import abstract_params
from specjax.models import get_family

AXES = ("data", "model")


def make_mesh(data: int | None = None, model: int | None = None, devices=None) -> Mesh:
  """A ("data", "model") mesh over the given (default: all) devices; unspecified sizes fill the rest."""
  devices = list(devices if devices is not None else jax.devices())
  n = len(devices)
  if data is None and model is None:
    data, model = 1, n
  elif data is None:
    data = n // model
  elif model is None:
    model = n // data
  if data * model != n or data < 1 or model < 1:
    raise ValueError(f"mesh shape ({data}, {model}) does not use exactly the {n} available devices")
  return Mesh(np.array(devices).reshape(data, model), AXES)


def parse_mesh_shape(shape: str) -> tuple[int, int]:
  """(data, model) from "DATAxMODEL", e.g. "1x16"."""
  try:
    data, model = (int(x) for x in str(shape).lower().split("x"))
  except ValueError:
    raise ValueError(f"mesh must look like DATAxMODEL (e.g. 2x4), got {shape!r}") from None
  if data < 1 or model < 1:
    raise ValueError(f"mesh sizes must be >= 1, got {shape!r}")
  return data, model


def check_mesh(mesh) -> Mesh:
  if not isinstance(mesh, Mesh):
    raise TypeError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
  missing = [a for a in AXES if a not in mesh.axis_names]
  if missing:
    raise ValueError(f"mesh axes {mesh.axis_names} lack {missing}; specjax needs a mesh with axes {AXES}")
  return mesh


def _param_spec(path: str, shape: tuple, config: ModelConfig, model_size: int) -> P:
  """The first of the family's `ShardRule`s that matches `path` (specjax/models/); no match replicates, and so does
  an array whose own dimension the axis does not divide (a quantized weight's scales when its blocks do not split)."""
  for rule in get_family(config.family).sharding:
    if re.search(rule.pattern, path):
      if getattr(config, rule.divides) % model_size or shape[rule.axis] % model_size:
        return P()
      spec = [None] * len(shape)
      spec[rule.axis] = "model"
      return P(*spec)
  return P()


def check_divides(config: ModelConfig, model_size: int, who: str = "model") -> None:
  """Strict form of the rules for large models: the "model" axis must split the query heads, the FFN width and
  the vocabulary evenly (a silently replicated 70B parameter would not fit). KV heads may replicate."""
  for name in ("n_heads", "ffn_dim", "vocab_size"):
    value = getattr(config, name)
    if value % model_size:
      raise ValueError(f"the mesh's model axis of size {model_size} does not divide the {who}'s {name}={value} "
                       f"({value} % {model_size} = {value % model_size}); choose a model axis that divides it")


def named_param_sharding(mesh: Mesh, config: ModelConfig, name: str, shape: tuple) -> NamedSharding:
  """The sharding of the parameter at dotted path `name` (e.g. "layers.0.attn.q.kernel")."""
  return NamedSharding(mesh, _param_spec(name, tuple(shape), config, mesh.shape["model"]))


def param_shardings(mesh: Mesh, config: ModelConfig, params: nnx.State):
  """A pytree of NamedShardings matching `params`."""
  model_size = mesh.shape["model"]

  def spec_for(path, leaf):
    names = [str(getattr(p, "key", getattr(p, "name", getattr(p, "idx", p)))) for p in path]
    names = [n for n in names if n != "value"]
    return NamedSharding(mesh, _param_spec(".".join(names), leaf.shape, config, model_size))

  return jax.tree_util.tree_map_with_path(spec_for, params)


def abstract_sharded_params(mesh: Mesh, config: ModelConfig, weights: str = "float"):
  """(graphdef, params as ShapeDtypeStructs carrying their mesh sharding): for AOT compiles and sharded restores.
  `weights` as in `load_model`: "float" (the config's dtype), or "int8" / "q4" (every linear and the embedding
  quantized, placed by the same rules)."""
  from specjax.quantize import abstract_quantized_params, check_weights  # quantize imports the model families
  scheme = check_weights(weights)
  graphdef, params = abstract_params(config) if scheme is None else abstract_quantized_params(config, scheme)
  shardings = param_shardings(mesh, config, params)
  return graphdef, jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), params, shardings)


def cache_sharding(mesh: Mesh, config: ModelConfig, batch: int) -> KVCache:
  data = "data" if batch % mesh.shape["data"] == 0 else None
  heads = "model" if config.n_kv_heads % mesh.shape["model"] == 0 else None
  kv = NamedSharding(mesh, P(None, data, None, heads, None))
  return KVCache(k=kv, v=kv, lengths=NamedSharding(mesh, P(data)))


def batch_sharding(mesh: Mesh, batch: int, rank: int) -> NamedSharding:
  data = "data" if batch % mesh.shape["data"] == 0 else None
  return NamedSharding(mesh, P(data, *([None] * (rank - 1))))


def place_for_generation(mesh, target, drafter, inputs):
  """Puts target (and draft) parameters and the batch inputs on the mesh."""
  check_mesh(mesh)
  target_params = jax.device_put(target.params, param_shardings(mesh, target.config, target.params))
  drafter_params = drafter.params() if drafter is not None else ()
  draft_model = getattr(drafter, "model", None)
  if draft_model is not None:
    drafter_params = jax.device_put(drafter_params, param_shardings(mesh, draft_model.config, drafter_params))
  else:
    drafter_params = jax.device_put(drafter_params, NamedSharding(mesh, P()))
  batch = inputs[0].shape[0]
  inputs = tuple(jax.device_put(x, batch_sharding(mesh, batch, x.ndim)) for x in inputs)
  return target_params, drafter_params, inputs


def sharded_verify(mesh: Mesh, target, batch: int):
  """The K+1-position target call as one `jax.jit` with explicit in/out shardings (what `pjit` became).

  Returns f(params, tokens_BxT, positions_BxT, cache) -> (logits_BxTxV, cache); the cache is donated.
  """
  check_mesh(mesh)
  graphdef, config = target.graphdef, target.config
  rows = batch_sharding(mesh, batch, 2)
  cache = cache_sharding(mesh, config, batch)
  logits = batch_sharding(mesh, batch, 3)

  from specjax import engine  # the engine imports this module's shardings
  from specjax.spec import TargetSpec
  # A custom call has no partitioning rule: no CPU kernels, so that the weights stay split.
  verify_call = functools.partial(engine.score_call, spec=TargetSpec(graphdef=graphdef, mesh=mesh, kernels=False))
  return jax.jit(verify_call, in_shardings=(param_shardings(mesh, config, target.params), rows, rows, cache),
                 out_shardings=(logits, cache), donate_argnums=(3,))
