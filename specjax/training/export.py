"""Trained drafters on disk: only what was trained (and the draft vocabulary) is stored; the frozen parts come
from the target when loading. A distilled DraftModel is a whole model, saved with `save_model`.

A head directory holds `drafter.json` (kind, static config, the target's shape) and `params/` (Orbax). It is
written into a hidden sibling first and renamed into place, so a crash leaves nothing `load_drafter` accepts.
"""

import dataclasses
import json
import os
import shutil

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from flax import nnx

from specjax.checkpoints.orbax_io import MARKER, load_orbax, save_model
from specjax.drafters.draft_model import DraftModel
from specjax.drafters.feature_head import FeatureHead, FeatureHeadConfig
from specjax.drafters.layer_skip import LayerSkip
from specjax.drafters.medusa import MedusaConfig, MedusaHeads
from specjax.model import Model

DESCRIPTION = "drafter.json"
PARAMS = "params"
FORMAT = "specjax-trained-drafter"


HEADS = {"feature_head": (FeatureHead, FeatureHeadConfig), "medusa": (MedusaHeads, MedusaConfig)}


def _describe(drafter) -> tuple[dict, dict]:
  """(JSON description, params to store) of a trained drafter."""
  for kind, (cls, _) in HEADS.items():
    if type(drafter) is cls:
      return ({"kind": kind, "config": dataclasses.asdict(drafter.config)},
              {"net": drafter.net.to_pure_dict(), "vocab_ids": drafter.frozen["vocab_ids"]})
  if isinstance(drafter, LayerSkip) and drafter.adapter_rank:
    return ({"kind": "layer_skip", "n_layers": drafter.n_layers, "adapter_rank": drafter.adapter_rank},
            {"adapter": drafter.adapter.to_pure_dict()})
  raise TypeError(f"cannot export {drafter!r}: not a trained head (a DraftModel is saved with save_model)")


def save_drafter(drafter, directory: str, dtype: str = "") -> str:
  """Writes the drafter's trained parameters (cast to `dtype` when given, e.g. "bfloat16" to ship it small)."""
  directory = os.path.abspath(directory)
  if isinstance(drafter, DraftModel) and not isinstance(drafter, LayerSkip):
    model = drafter.model
    if dtype:
      model = model.with_params(jax.tree.map(lambda x: x.astype(dtype), model.params))
    return save_model(model, directory, overwrite=True)
  description, params = _describe(drafter)
  if dtype:
    params = jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, params)
  partial = os.path.join(os.path.dirname(directory), f".{os.path.basename(directory)}.partial")
  shutil.rmtree(partial, ignore_errors=True)
  os.makedirs(partial)
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(os.path.join(partial, PARAMS), params)
  checkpointer.wait_until_finished()
  checkpointer.close()
  with open(os.path.join(partial, DESCRIPTION), "w", encoding="utf-8") as f:
    json.dump(dict(description, format=FORMAT), f, indent=1)
  shutil.rmtree(directory, ignore_errors=True)
  os.rename(partial, directory)
  return directory


def _restore(directory: str, template: dict) -> dict:
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), template)
  checkpointer = ocp.StandardCheckpointer()
  try:
    restored = checkpointer.restore(os.path.join(directory, PARAMS), abstract)
  except Exception as err:
    raise ValueError(f"{directory}: cannot restore the drafter's parameters: {err}") from err
  finally:
    checkpointer.close()
  return jax.tree.map(lambda x, t: jnp.asarray(x, t.dtype), restored, abstract)


def _with_net(net: nnx.State, pure: dict) -> nnx.State:
  net = jax.tree.map(lambda x: x, net)
  nnx.replace_by_pure_dict(net, pure)
  return net


def load_drafter(directory: str, target: Model):
  """The drafter saved in `directory`, attached to `target` (whose embedding, head or layers it reuses)."""
  directory = os.path.abspath(directory)
  if os.path.isfile(os.path.join(directory, MARKER)):
    return DraftModel(load_orbax(directory, dtype=target.config.dtype))
  path = os.path.join(directory, DESCRIPTION)
  if not os.path.isfile(path):
    raise ValueError(f"{directory} is not a trained drafter: {DESCRIPTION} is missing (an unfinished save?)")
  with open(path, encoding="utf-8") as f:
    description = json.load(f)
  kind = description.get("kind")
  if kind in HEADS:
    cls, config_cls = HEADS[kind]
    config = config_cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in description["config"].items()})
    if (config.d_model, config.vocab_size) != (target.config.d_model, target.config.vocab_size):
      raise ValueError(f"{directory}: this {kind} was trained for d_model={config.d_model}, vocab={config.vocab_size}"
                       f"; the target has d_model={target.config.d_model}, vocab={target.config.vocab_size}")
    fresh = cls.create(target, config, vocab_ids=None if config.draft_vocab_size == config.vocab_size
                       else list(range(config.draft_vocab_size)))
    saved = _restore(directory, {"net": fresh.net.to_pure_dict(), "vocab_ids": fresh.frozen["vocab_ids"]})
    vocab_ids = None if config.draft_vocab_size == config.vocab_size else saved["vocab_ids"]
    return cls.create(target, config, vocab_ids=vocab_ids).with_net(_with_net(fresh.net, saved["net"]))
  if kind == "layer_skip":
    fresh = LayerSkip.create(target, description["n_layers"], description["adapter_rank"])
    saved = _restore(directory, {"adapter": fresh.adapter.to_pure_dict()})
    return fresh.with_adapter(_with_net(fresh.adapter, saved["adapter"]))
  raise ValueError(f"{path}: unknown drafter kind {kind!r}")
