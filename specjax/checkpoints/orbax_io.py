"""specjax's own checkpoint directory: parameters via Orbax, config and tokenizer as plain files.

Saving is atomic: everything goes into a hidden sibling `.{name}.partial`, the marker file is written last,
then one rename moves it into place. A directory without the marker is refused by `load_orbax`.
"""

import json
import os
import shutil

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from specjax.config import ModelConfig
from specjax.model import Model, model_from_flat_params
from specjax.sharding import check_mesh, named_param_sharding
from specjax.tokenizer import Tokenizer

MARKER = "specjax_checkpoint.json"
CONFIG = "config.json"
PARAMS = "params"
TOKENIZER = "tokenizer"
FORMAT = "specjax-orbax"
VERSION = 1


def is_orbax_dir(directory: str) -> bool:
  """Whether `directory` looks like a save_model directory (complete or not)."""
  if os.path.basename(os.path.normpath(directory)).endswith(".partial"):
    return True
  return any(os.path.exists(os.path.join(directory, n)) for n in (MARKER, PARAMS))


def _nest(flat: dict) -> dict:
  """{"layers.0.attn.q.kernel": x} -> {"layers": {"0": {"attn": {"q": {"kernel": x}}}}}."""
  tree = {}
  for name, value in flat.items():
    node = tree
    *parents, leaf = name.split(".")
    for part in parents:
      node = node.setdefault(part, {})
    node[leaf] = value
  return tree


def _flatten(tree: dict, prefix: str = "") -> dict:
  flat = {}
  for key, value in tree.items():
    name = f"{prefix}{key}"
    flat.update(_flatten(value, name + ".") if isinstance(value, dict) else {name: value})
  return flat


def _sync(name: str) -> None:
  if jax.process_count() > 1:
    ocp.multihost.sync_global_processes(name)


def _write_json(path: str, value: dict) -> None:
  with open(path, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=1)
    f.flush()
    os.fsync(f.fileno())


def _finalize(partial: str, directory: str, shapes: dict) -> None:
  """Writes the marker (last file), then renames the finished directory into place."""
  _write_json(os.path.join(partial, MARKER), {"format": FORMAT, "version": VERSION, "params": shapes})
  if os.path.exists(directory):  # overwrite=True: move the old one aside first, delete it after
    old = os.path.join(os.path.dirname(directory), f".{os.path.basename(directory)}.old")
    shutil.rmtree(old, ignore_errors=True)
    os.rename(directory, old)
    os.rename(partial, directory)
    shutil.rmtree(old, ignore_errors=True)
  else:
    os.rename(partial, directory)


def save_model(model: Model, directory: str | os.PathLike, overwrite: bool = False) -> str:
  """Saves params, config and tokenizer to `directory` (atomically); returns its absolute path.

  Every process of a multi-host run must call it; process 0 writes the plain files and renames."""
  directory = os.path.abspath(os.fspath(directory))
  if os.path.exists(directory) and not overwrite:
    raise FileExistsError(f"{directory} already exists; pass overwrite=True to replace it")
  partial = os.path.join(os.path.dirname(directory), f".{os.path.basename(directory)}.partial")
  lead = jax.process_index() == 0
  if lead:
    shutil.rmtree(partial, ignore_errors=True)  # left by an earlier interrupted save
    os.makedirs(partial)
  _sync("specjax_save_start")
  try:
    flat = model.flat_params()
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.join(partial, PARAMS), _nest(flat))
    checkpointer.wait_until_finished()
    checkpointer.close()
    _sync("specjax_save_params")
    if lead:
      _write_json(os.path.join(partial, CONFIG), model.config.to_dict())
      if model.tokenizer is not None:
        model.tokenizer.save(os.path.join(partial, TOKENIZER))
      _finalize(partial, directory, {name: list(x.shape) for name, x in flat.items()})
  except Exception:
    if lead:
      shutil.rmtree(partial, ignore_errors=True)
    raise
  _sync("specjax_save_done")
  return directory


def _sharding(mesh, config: ModelConfig, name: str, shape) -> jax.sharding.Sharding:
  if mesh is None:
    return jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return named_param_sharding(check_mesh(mesh), config, name, shape)


def load_orbax(directory: str | os.PathLike, dtype: str | None = None, mesh=None) -> Model:
  """The Model written by `save_model`; parameters are restored directly in `dtype` (default: as saved).

  With a ("data", "model") `mesh`, every parameter is restored straight into its mesh layout (specjax.sharding
  rules): each device reads only its own shard, so no host ever holds a full copy."""
  directory = os.path.abspath(os.fspath(directory))
  marker = os.path.join(directory, MARKER)
  if not os.path.isfile(marker):
    raise ValueError(f"{directory} is an incomplete specjax checkpoint: {MARKER} is missing, so the save that "
                     "wrote it never finished; save the model again")
  with open(marker, encoding="utf-8") as f:
    manifest = json.load(f)
  if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
    raise ValueError(f"{marker}: unknown checkpoint format {manifest.get('format')!r} v{manifest.get('version')}")
  with open(os.path.join(directory, CONFIG), encoding="utf-8") as f:
    config = ModelConfig.from_dict(json.load(f))
  if dtype is not None:
    config = config.replace(dtype=dtype)
  dt = jnp.dtype(config.dtype)
  target = {name: jax.ShapeDtypeStruct(tuple(shape), dt, sharding=_sharding(mesh, config, name, shape))
            for name, shape in manifest["params"].items()}
  checkpointer = ocp.StandardCheckpointer()
  try:
    restored = checkpointer.restore(os.path.join(directory, PARAMS), _nest(target))
  except Exception as err:
    raise ValueError(f"{directory}: cannot restore parameters: {err}") from err
  finally:
    checkpointer.close()
  tokenizer_dir = os.path.join(directory, TOKENIZER)
  tokenizer = Tokenizer.load(tokenizer_dir) if os.path.isdir(tokenizer_dir) else None
  return model_from_flat_params(config, _flatten(restored), tokenizer=tokenizer, source=directory)
