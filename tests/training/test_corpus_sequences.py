"""Training sequences from a built text corpus (`CorpusConfig.text_corpus`): an equal share per kind, split among a
kind's sources by their tokens, each sequence one window of one document, seeded; bad input named."""

import json
import os

import numpy as np
import pytest

from specjax.training import shards
from specjax.training.corpus import text_corpus_sequences


def _corpus(root, sources):
  """A manifest and one shard per source: {name: (kind, documents)}."""
  entries, by_kind = [], {}
  for name, (kind, documents) in sources.items():
    os.makedirs(os.path.join(root, name))
    tokens = shards.write_shard(shards.shard_path(os.path.join(root, name), 0), documents, np.uint16)
    entries.append({"name": name, "kind": kind, "directory": name, "tokens": tokens})
    by_kind[kind] = by_kind.get(kind, 0) + tokens
  with open(os.path.join(root, "manifest.json"), "w") as f:
    json.dump({"sources": entries, "tokens_by_kind": by_kind}, f)


def test_shares_windows_and_seed(tmp_path):
  root = str(tmp_path)
  _corpus(root, {"chat": ("chat", [list(range(1000, 1100))] * 4),                 # 400 tokens
                 "code_a": ("code", [list(range(2000, 2300))]),                    # 300 tokens
                 "code_b": ("code", [list(range(3000, 3100))])})                   # 100 tokens
  sequences = text_corpus_sequences(root, 8, 16, seed=0)
  assert len(sequences) == 8 and all(len(s) == 16 for s in sequences)
  first = [s[0] // 1000 for s in sequences]
  assert first.count(1) == 4 and first.count(2) == 3 and first.count(3) == 1
  for s in sequences:
    assert s == list(range(s[0], s[0] + 16)) and (s[0] % 1000) % 16 == 0   # one window of one document
  assert text_corpus_sequences(root, 8, 16, seed=0) == sequences
  assert text_corpus_sequences(root, 8, 16, seed=1) != sequences


def test_bad_input_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="manifest.json is missing"):
    text_corpus_sequences(str(tmp_path / "none"), 4, 16, seed=0)
  _corpus(str(tmp_path), {"chat": ("chat", [list(range(40))])})
  with pytest.raises(ValueError, match="'chat' holds 3 windows of 16 tokens, fewer than the 4"):
    text_corpus_sequences(str(tmp_path), 4, 16, seed=0)
