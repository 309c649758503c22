"""awscli's examples (Apache-2.0): how-to pages of prose, shell commands and JSON output (reStructuredText)."""

import os

from specjax.training.sources.base import Document, package_dir


def read(root: str = ""):
  """One Document per example file, in path order."""
  base = os.path.join(package_dir("awscli", root), "examples")
  for directory, _, files in sorted(os.walk(base)):
    for name in sorted(files):
      if name.endswith(".rst"):
        with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as f:
          text = f.read().strip()
        if text:
          yield Document("awscli", os.path.relpath(os.path.join(directory, name), base), text=text)
