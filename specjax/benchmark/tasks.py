"""The task suite shipped in `prompts/*.json`: code, prose, structured output and long context."""

import functools
import json
import os

CATEGORIES = ("code", "prose", "structured", "long_context")
PROMPT_DIR = os.path.join(os.path.dirname(__file__), "prompts")


@functools.lru_cache(maxsize=None)
def load_category(category: str) -> tuple[dict, ...]:
  """The prompts of one category, each a dict with at least `id` and `prompt` (see README of the fields below).

  code: `entry_point`, `tests` (assert statements); structured: `format` ("json" or "csv");
  long_context: `passage`, `instruction`, optional `expected` (a phrase a correct quote contains).
  """
  if category not in CATEGORIES:
    raise ValueError(f"unknown category {category!r}; known: {list(CATEGORIES)}")
  with open(os.path.join(PROMPT_DIR, f"{category}.json")) as f:
    return tuple(json.load(f))


def select(category: str, n: int, skip: int = 0) -> list[dict]:
  """The first n prompts of a category after its first `skip`, or all of those when n is 0 (long_context is ordered
  by length, so small n keeps runs short)."""
  prompts = load_category(category)[skip:]
  if n < 0:
    raise ValueError(f"prompts_per_category must be >= 0 (0: all), got {n}")
  if n > len(prompts) or not prompts:
    raise ValueError(f"asked for {n or 'all'} prompts of category {category!r} after its first {skip}, but it has "
                     f"only {len(prompts) + skip}")
  return list(prompts[:n or len(prompts)])


def byte_ids(text: str, vocab_size: int, limit: int) -> list[int]:
  """Token ids for a model without a tokenizer (random test models): UTF-8 bytes folded into the vocabulary."""
  ids = [(b % (vocab_size - 1)) + 1 for b in text.encode("utf-8")]
  return ids[:limit] if limit else ids
