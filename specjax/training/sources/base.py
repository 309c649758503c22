"""What a corpus reader yields, and how a source names its origin and license."""

import dataclasses
import importlib.util
import os
from typing import Callable, Iterator

KINDS = ("chat", "prose", "code", "structured")


@dataclasses.dataclass(frozen=True)
class Document:
  """One training document: plain `text`, or a conversation as `messages` ({"role", "content"} dicts, user and
  assistant alternating) that the target's chat template renders."""

  source: str
  doc_id: str
  text: str = ""
  messages: tuple = ()

  def __post_init__(self):
    if bool(self.text) == bool(self.messages):
      raise ValueError(f"document {self.source}/{self.doc_id} needs text or messages, not both or neither")


@dataclasses.dataclass(frozen=True)
class Source:
  """A packaged source: its reader (`read(root) -> Iterator[Document]`, root = where its files are, "" = the
  installed package), the kind of text, how to install it and the license its package states."""

  name: str
  kind: str
  read: Callable[[str], Iterator[Document]]
  package: str             # the Python package (import name) that holds the data
  install: str             # the pip requirement that brings it
  license: str
  license_note: str = ""

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"source {self.name}: kind must be one of {KINDS}, got {self.kind!r}")


def package_dir(package: str, root: str = "") -> str:
  """`root` if given, else the installed package's directory; a clear error naming the pip requirement otherwise."""
  if root:
    if not os.path.isdir(root):
      raise FileNotFoundError(f"corpus source directory {root!r} does not exist")
    return root
  spec = importlib.util.find_spec(package)
  if spec is None or not spec.submodule_search_locations:
    raise ModuleNotFoundError(f"the corpus source package {package!r} is not installed")
  return list(spec.submodule_search_locations)[0]
