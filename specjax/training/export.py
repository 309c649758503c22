"""Trained drafters on disk: only what was trained (and the draft vocabulary) is stored; the frozen parts come
from the target when loading. A distilled DraftModel is a whole model, saved with `save_model`.

A head directory holds `drafter.json` (kind, static config, the target's shape) and `params/` (Orbax). It is
written into a hidden sibling first and renamed into place, so a crash leaves nothing `load_drafter` accepts.
"""

import json
import os
import shutil

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from specjax.checkpoints.orbax_io import MARKER, load_orbax, save_model
from specjax.drafters import registry
from specjax.drafters.draft_model import DraftModel
from specjax.model import Model

DESCRIPTION = "drafter.json"
PARAMS = "params"
FORMAT = "specjax-trained-drafter"


def _describe(drafter) -> tuple[dict, dict]:
  """(JSON description, params to store) of a trained drafter: its registry name and what its `saved()` gives."""
  static, params = drafter.saved()
  return {"kind": registry.name_of(drafter), **static}, params


def save_drafter(drafter, directory: str, dtype: str = "") -> str:
  """Writes the drafter's trained parameters (cast to `dtype` when given, e.g. "bfloat16" to ship it small)."""
  directory = os.path.abspath(directory)
  if type(drafter) is DraftModel:
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
    raise ValueError(f"cannot restore the drafter's parameters: {err}") from err
  finally:
    checkpointer.close()
  return jax.tree.map(lambda x, t: jnp.asarray(x, t.dtype), restored, abstract)


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
  if kind not in registry.names():
    raise ValueError(f"{path}: unknown drafter kind {kind!r}; known: {list(registry.names())}")
  try:
    return registry.get(kind).drafter.from_saved(target, description, lambda template: _restore(directory, template))
  except ValueError as err:
    raise ValueError(f"{directory}: {err}") from err
