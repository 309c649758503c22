"""Prompt lookup (n-gram) drafting: copy what followed the latest earlier occurrence of the row's suffix."""

import jax
import jax.numpy as jnp

from specjax.drafters.base import Drafter


class PromptLookup(Drafter):
  """Deterministic proposals (one-hot q) from the row's prompt and output so far; no parameters.

  Tries suffix lengths from max_ngram down to min_ngram and takes the most recent match. Without a
  match it proposes the last token repeated. Under the adaptive policy a row is worth verifying only with a
  match of at least `worth_ngram` tokens: a lone repeated token predicts the continuation poorly.
  """

  def __init__(self, max_ngram: int = 3, min_ngram: int = 1, worth_ngram: int = 2):
    if not (isinstance(min_ngram, int) and isinstance(max_ngram, int)) or not 1 <= min_ngram <= max_ngram:
      raise ValueError(f"PromptLookup needs 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, "
                       f"max_ngram={max_ngram}")
    if isinstance(worth_ngram, bool) or not isinstance(worth_ngram, int) or not 1 <= worth_ngram:
      raise ValueError(f"PromptLookup needs an int worth_ngram >= 1, got {worth_ngram!r}")
    self.max_ngram = max_ngram
    self.min_ngram = min_ngram
    self.worth_ngram = worth_ngram

  def _key(self):
    return (self.max_ngram, self.min_ngram, self.worth_ngram)

  def __hash__(self):
    return hash((PromptLookup,) + self._key())

  def __eq__(self, other):
    return isinstance(other, PromptLookup) and other._key() == self._key()

  def __repr__(self):
    return f"PromptLookup(max_ngram={self.max_ngram}, min_ngram={self.min_ngram}, worth_ngram={self.worth_ngram})"

  def propose(self, params, state, tokens_BxS, seq_len_B, k, sampling, keys_B):
    draft_BxK = jax.vmap(lambda row, length: self._row(row, length, k)[0])(tokens_BxS, seq_len_B)
    return draft_BxK, None, state

  def worth_verifying(self, params, state, tokens_BxS, seq_len_B):
    matched_B = jax.vmap(lambda row, length: self._row(row, length, 1)[1])(tokens_BxS, seq_len_B)
    return matched_B >= min(self.worth_ngram, self.max_ngram)

  def _row(self, seq_S: jax.Array, length: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """K proposed tokens and the length of the n-gram they continue (0: no match)."""
    size = seq_S.shape[0]
    starts_S = jnp.arange(size)
    continuation = jnp.int32(-1)
    matched = jnp.int32(0)
    for n in range(self.max_ngram, self.min_ngram - 1, -1):
      suffix_N = jax.lax.dynamic_slice_in_dim(seq_S, jnp.maximum(length - n, 0), n)
      match_S = jnp.ones((size,), bool)
      for i in range(n):
        match_S &= jnp.roll(seq_S, -i) == suffix_N[i]
      # The n-gram at j must end before the suffix starts, and its continuation j + n must exist.
      valid_S = match_S & (starts_S + n < length) & (length >= n)
      latest = jnp.max(jnp.where(valid_S, starts_S, -1))
      found = (continuation < 0) & (latest >= 0)
      matched = jnp.where(found, n, matched)
      continuation = jnp.where(found, latest + n, continuation)
    offsets = jnp.minimum(continuation + jnp.arange(k), length - 1)
    fallback = jnp.full((k,), length - 1)
    return seq_S[jnp.where(continuation >= 0, offsets, fallback)], matched
