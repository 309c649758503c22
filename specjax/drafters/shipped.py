"""Trained drafters that ship inside the package, so benchmarks and notebooks run them without training first.

`shipped_heads/<model>/<kind>/` is a directory `specjax.training.export.load_drafter` reads (bfloat16, each under
MAX_BYTES); `shipped_heads/MANIFEST.json` records, for each, the target it was trained for, the command that made
it and the tokens per round measured on the shipped copy (`scripts/ship_drafter.py` writes both). A method's source
"shipped" picks the entry of its kind whose target shape matches the target's.
"""

import json
import os

SHIPPED = "shipped"
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shipped_heads")
MAX_BYTES = 20 * 2**20
SHAPE_KEYS = ("d_model", "n_layers", "n_heads", "n_kv_heads", "vocab_size")


def target_shape(config) -> dict:
  """The target fields a shipped drafter must match (it reuses the target's embedding, head and features)."""
  return {key: int(getattr(config, key)) for key in SHAPE_KEYS}


def manifest_path(root: str = ROOT) -> str:
  return os.path.join(root, "MANIFEST.json")


def manifest(root: str = ROOT) -> list[dict]:
  """The manifest's entries ([] when nothing ships)."""
  path = manifest_path(root)
  if not os.path.isfile(path):
    return []
  with open(path, encoding="utf-8") as f:
    return json.load(f)["drafters"]


def directory_bytes(path: str) -> int:
  return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def shipped_directory(kind: str, target_config) -> str:
  """The shipped `kind` drafter for a target of this shape; a ValueError naming what ships when none fits."""
  entries = manifest()
  shape = target_shape(target_config)
  for entry in entries:
    if entry["kind"] == kind and entry["target_shape"] == shape:
      path = os.path.join(ROOT, entry["path"])
      if not os.path.isdir(path):
        raise ValueError(f"the shipped {kind} drafter's directory {path} is missing: reinstall specjax")
      return path
  shipped = [f"{e['kind']} for {e['model']}" for e in entries] or ["nothing"]
  raise ValueError(f"no shipped {kind!r} drafter fits a target of shape {shape}; shipped: {', '.join(shipped)} "
                   f"(train one with scripts/train_draft.py and pass its directory instead of {SHIPPED!r})")
