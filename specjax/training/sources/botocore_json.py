"""botocore's service descriptions (Apache-2.0): JSON documents (structured text), one operation or shape a line."""

import gzip
import json
import os

from specjax.training.sources.base import Document, package_dir

MAX_CHARS = 40_000   # a description's operations and shapes, cut into documents of at most this many characters


def read(root: str = ""):
  """One Document per chunk of each service-2.json: its operations and shapes, one JSON object per line."""
  base = os.path.join(package_dir("botocore", root), "data")
  for directory, _, files in sorted(os.walk(base)):
    name = next((n for n in ("service-2.json", "service-2.json.gz") if n in files), None)
    if name is None:
      continue
    opener = gzip.open if name.endswith(".gz") else open   # newer botocore ships its data gzipped
    with opener(os.path.join(directory, name), "rt", encoding="utf-8") as f:
      service = json.load(f)
    name = os.path.relpath(directory, base)
    lines = [json.dumps({kind: {key: value}}, separators=(",", ":"))
             for kind in ("operations", "shapes") for key, value in sorted(service.get(kind, {}).items())]
    chunk, size, part = [], 0, 0
    for line in lines + [None]:
      if line is None or (chunk and size + len(line) > MAX_CHARS):
        if chunk:
          yield Document("botocore", f"{name}#{part}", text="\n".join(chunk))
        chunk, size, part = [], 0, part + 1
      if line is not None:
        chunk.append(line)
        size += len(line) + 1
