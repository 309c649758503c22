"""Prompt lookup proposes what followed the latest earlier occurrence of the sequence's suffix."""

import jax.numpy as jnp
import numpy as np
import pytest

from specjax.drafters import PromptLookup


def propose(drafter, rows, k, size=32):
  tokens = np.zeros((len(rows), size), np.int32)
  for i, row in enumerate(rows):
    tokens[i, :len(row)] = row
  draft, q, _ = drafter.propose((), (), jnp.asarray(tokens), jnp.asarray([len(r) for r in rows], jnp.int32), k,
                                None, None)
  assert q is None  # deterministic: one-hot q
  return np.asarray(draft).tolist()


def test_longest_ngram_then_latest_match():
  drafter = PromptLookup(max_ngram=3, min_ngram=1)
  # suffix [1, 2, 3] occurred at 0 (followed by 4 5) ; [2, 3] also later at 6 (followed by 9): trigram wins
  assert propose(drafter, [[1, 2, 3, 4, 5, 7, 2, 3, 9, 1, 2, 3]], k=2) == [[4, 5]]
  # only a unigram match: the latest earlier occurrence of 7 is followed by 8
  assert propose(drafter, [[7, 1, 7, 8, 6, 7]], k=1) == [[8]]


def test_rows_are_independent_and_proposals_stop_at_the_sequence_end():
  drafter = PromptLookup(max_ngram=2)
  rows = [[5, 6, 7, 5, 6], [1, 2, 3, 4]]
  out = propose(drafter, rows, k=4)
  assert out[0] == [7, 5, 6, 6]  # continuation 7 5 6 then clipped at the last token
  assert out[1] == [4, 4, 4, 4]  # no match: the last token repeated


def test_worth_verifying_needs_a_long_enough_match():
  rows = [[1, 2, 3, 4, 5, 7, 2, 3, 9, 1, 2, 3], [7, 1, 7, 8, 6, 7], [1, 2, 3, 4]]
  tokens = np.zeros((3, 32), np.int32)
  for i, row in enumerate(rows):
    tokens[i, :len(row)] = row
  lengths = jnp.asarray([len(r) for r in rows], jnp.int32)
  worth = PromptLookup(max_ngram=3).worth_verifying((), (), jnp.asarray(tokens), lengths)
  assert np.asarray(worth).tolist() == [True, False, False]   # trigram; unigram only; no match
  worth = PromptLookup(max_ngram=3, worth_ngram=1).worth_verifying((), (), jnp.asarray(tokens), lengths)
  assert np.asarray(worth).tolist() == [True, True, False]


def test_bad_ngram_bounds():
  with pytest.raises(ValueError, match="min_ngram"):
    PromptLookup(max_ngram=1, min_ngram=2)
  with pytest.raises(ValueError, match="worth_ngram"):
    PromptLookup(worth_ngram=0)
