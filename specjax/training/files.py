"""JSON files the training and its tools write whole or not at all: a crash leaves the previous file (or none)."""

import json
import os


def write_json(path: str, value) -> None:
  """Writes `value` to path + ".partial", then renames it over `path`."""
  partial = path + ".partial"
  with open(partial, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=1)
  os.replace(partial, path)
