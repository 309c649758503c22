"""The Python standard library's sources (PSF-2.0): code with its docstrings and comments, one file a document."""

import os
import sysconfig

from specjax.training.sources.base import Document

SKIP_DIRS = ("test", "tests", "idle_test", "site-packages", "__pycache__", "lib2to3", "ensurepip")
MAX_CHARS = 60_000   # very long modules are cut (a document is split into training sequences anyway)


def source_paths(root: str = ""):
  """(path, path relative to the base) of every .py file under the standard library (or `root`), in a fixed order,
  tests and installed packages left out."""
  base = root or sysconfig.get_paths()["stdlib"]
  if not os.path.isdir(base):
    raise FileNotFoundError(f"the Python sources directory {base!r} does not exist")
  for directory, dirs, files in os.walk(base):
    dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
    for name in sorted(files):
      if name.endswith(".py"):
        yield os.path.join(directory, name), os.path.relpath(os.path.join(directory, name), base)


def read(root: str = ""):
  """One Document per .py file under the standard library (or `root`), tests and installed packages left out."""
  for path, relative in source_paths(root):
    with open(path, encoding="utf-8", errors="replace") as f:
      text = f.read(MAX_CHARS).strip()
    if text:
      yield Document("python", relative, text=text)
