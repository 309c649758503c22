"""Benchmark prompts stay out of the training corpus: a document that shares any run of `n` words with a benchmark
prompt (its prompt, passage or instruction) is dropped, the way decontamination checks n-gram overlap."""

import re

from specjax.benchmark import tasks

SHINGLE_WORDS = 8
_WORD = re.compile(r"[a-z0-9]+")
_FIELDS = ("prompt", "passage", "instruction")


def shingles(text: str, n: int = SHINGLE_WORDS) -> set[tuple[str, ...]]:
  words = _WORD.findall(text.lower())
  return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def benchmark_shingles(n: int = SHINGLE_WORDS) -> set[tuple[str, ...]]:
  """Every n-word run of every benchmark prompt's text fields."""
  found = set()
  for category in tasks.CATEGORIES:
    for item in tasks.load_category(category):
      for field in _FIELDS:
        if isinstance(item.get(field), str):
          found |= shingles(item[field], n)
  return found


def overlaps(text: str, held_out: set, n: int = SHINGLE_WORDS) -> bool:
  """Whether `text` shares an n-word run with the held-out set."""
  words = _WORD.findall(text.lower())
  return any(tuple(words[i:i + n]) in held_out for i in range(len(words) - n + 1))
