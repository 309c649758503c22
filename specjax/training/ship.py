"""Copies a trained drafter into the package (specjax.drafters.shipped), in bfloat16, with its manifest entry: the
target it fits, the command that trained it, its size and the tokens per round measured on the shipped copy."""

import datetime
import os
import shutil

from specjax.drafters import registry
from specjax.drafters.shipped import MAX_BYTES, directory_bytes, manifest, manifest_path, target_shape
from specjax.model import Model
from specjax.training.acceptance import heldout_prompts, tokens_per_round
from specjax.training.export import load_drafter, save_drafter
from specjax.training.files import write_json


def ship_drafter(drafter_dir: str, target: Model, model_name: str, command: str, root: str,
                 categories=("code", "prose", "structured"), prompts_per_category: int = 2, k: int = 4,
                 max_new_tokens: int = 64, max_prompt_tokens: int = 0, dtype: str = "bfloat16",
                 max_bytes: int = MAX_BYTES) -> dict:
  """Writes root/<model_name>/<kind>/ and its entry in root/MANIFEST.json (replacing one of the same model and
  kind); returns the entry. Nothing is left behind when the copy is too large or fails to load. max_prompt_tokens
  cuts the prompts of a target without a tokenizer (a test's)."""
  if not command.strip():
    raise ValueError("command must say how the drafter was trained (the manifest records it)")
  drafter = load_drafter(drafter_dir, target)
  kind = registry.name_of(drafter)
  relative = os.path.join(model_name, kind)
  destination = os.path.join(root, relative)
  staged = os.path.join(root, f".{model_name}-{kind}.staged")
  shutil.rmtree(staged, ignore_errors=True)
  os.makedirs(root, exist_ok=True)
  try:
    save_drafter(drafter, staged, dtype=dtype)
    size = directory_bytes(staged)
    if size > max_bytes:
      raise ValueError(f"{drafter_dir} is {size / 2**20:.1f} MiB in {dtype or 'its own dtype'}; shipped drafters "
                       f"stay under {max_bytes / 2**20:.0f} MiB")
    prompts = heldout_prompts(target, categories, prompts_per_category, max_prompt_tokens)
    measured = tokens_per_round(target, load_drafter(staged, target), prompts, k, max_new_tokens)
    os.makedirs(os.path.dirname(destination), exist_ok=True)
    shutil.rmtree(destination, ignore_errors=True)
    os.rename(staged, destination)
  finally:
    shutil.rmtree(staged, ignore_errors=True)
  entry = {"model": model_name, "kind": kind, "path": relative, "target_shape": target_shape(target.config),
           "dtype": dtype, "bytes": size, "trained_with": command.strip(),
           "date": datetime.date.today().isoformat(),
           "tokens_per_round": {"k": k, "max_new_tokens": max_new_tokens, "greedy": True,
                                "prompts_per_category": prompts_per_category,
                                **{c: round(measured[c], 3) for c in ("all",) + tuple(categories)}}}
  _write_manifest(root, entry)
  return entry


def _write_manifest(root: str, entry: dict) -> None:
  entries = [e for e in manifest(root) if (e["model"], e["kind"]) != (entry["model"], entry["kind"])] + [entry]
  write_json(manifest_path(root), {"drafters": sorted(entries, key=lambda e: (e["model"], e["kind"]))})
