"""Prompt lookup (n-gram) drafting: copy what followed the latest earlier occurrence of the row's suffix."""

import jax
import jax.numpy as jnp

from specjax.drafters.base import Drafter
from specjax.trees.grow import grow


class PromptLookup(Drafter):
  """Deterministic proposals (one-hot q) from the row's prompt and output so far; no parameters.

  Tries suffix lengths from max_ngram down to min_ngram and takes the most recent match. Without a
  match it proposes the last token repeated. Under the adaptive policy a row is worth verifying only with a
  match of at least `worth_ngram` tokens: a lone repeated token predicts the continuation poorly. In a tree, a
  context's children are the tokens that followed the longest matching n-gram, most frequent first (then most
  recent): several continuations as branches, q their frequencies.
  """

  branches = True

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

  def propose_tree(self, params, state, tokens_BxS, seq_len_B, tree, sampling, keys_B, vocab_size):
    """The payload of a node is its path; its context is the row's sequence followed by that path."""
    depth_max = tree.max_depth

    def ngram_logits(seq_S, length, path_D, depth: int):
      return self._ngram_logits(seq_S.at[length + jnp.arange(depth)].set(path_D[:depth], mode="drop"),
                                length + depth, vocab_size)

    def expand(state, tokens_BxL, path_BxLxD, slots_BxL, layout, depth):
      path_BxLxD = path_BxLxD.at[:, :, depth - 1].set(tokens_BxL)
      per_node = jax.vmap(lambda seq, length, paths: jax.vmap(lambda path: ngram_logits(seq, length, path, depth))(
          paths))
      return per_node(tokens_BxS, seq_len_B, path_BxLxD), path_BxLxD, state

    root_logits_BxV = jax.vmap(lambda seq, length: self._ngram_logits(seq, length, vocab_size))(tokens_BxS, seq_len_B)
    root_path_BxD = jnp.zeros((tokens_BxS.shape[0], depth_max), jnp.int32)
    draft, state = grow(tree, expand, state, root_logits_BxV, root_path_BxD, seq_len_B - 1, sampling, keys_B)
    return draft.tokens_BxN, draft.parent_BxN, draft.q_BxN1xV, state

  def _ngram_logits(self, seq_S: jax.Array, length: jax.Array, vocab_size: int) -> jax.Array:
    """[V] log-counts of the tokens that followed earlier occurrences of the longest matching suffix (n from
    max_ngram down to min_ngram), plus a recency bonus under 0.001 that orders equal counts; without a match,
    the last token alone (as the chain's fallback)."""
    size = seq_S.shape[0]
    starts_S = jnp.arange(size)
    counts_V = jnp.zeros((vocab_size,), jnp.float32)
    latest_V = jnp.zeros((vocab_size,), jnp.float32)
    found = jnp.bool_(False)
    for n in range(self.max_ngram, self.min_ngram - 1, -1):
      valid_S = _earlier_matches(seq_S, length, n)
      following_S = jnp.roll(seq_S, -n)
      use = ~found & valid_S.any()
      counts_V = jnp.where(use, jnp.zeros_like(counts_V).at[following_S].add(valid_S.astype(jnp.float32)), counts_V)
      latest_V = jnp.where(use, jnp.zeros_like(latest_V).at[following_S].max(
          jnp.where(valid_S, (starts_S + 1) / (size + 1), 0.0)), latest_V)
      found = found | use
    last_V = jax.nn.one_hot(seq_S[jnp.maximum(length - 1, 0)], vocab_size, dtype=jnp.float32)
    counts_V = jnp.where(found, counts_V, last_V)
    return jnp.where(counts_V > 0, jnp.log(jnp.maximum(counts_V, 1.0)) + 1e-3 * latest_V, -jnp.inf)

  def worth_verifying(self, params, state, tokens_BxS, seq_len_B):
    matched_B = jax.vmap(lambda row, length: self._row(row, length, 1)[1])(tokens_BxS, seq_len_B)
    return matched_B >= min(self.worth_ngram, self.max_ngram)

  def _row(self, seq_S: jax.Array, length: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """K proposed tokens and the length of the n-gram they continue (0: no match)."""
    starts_S = jnp.arange(seq_S.shape[0])
    continuation = jnp.int32(-1)
    matched = jnp.int32(0)
    for n in range(self.max_ngram, self.min_ngram - 1, -1):
      valid_S = _earlier_matches(seq_S, length, n)
      latest = jnp.max(jnp.where(valid_S, starts_S, -1))
      found = (continuation < 0) & (latest >= 0)
      matched = jnp.where(found, n, matched)
      continuation = jnp.where(found, latest + n, continuation)
    offsets = jnp.minimum(continuation + jnp.arange(k), length - 1)
    fallback = jnp.full((k,), length - 1)
    return seq_S[jnp.where(continuation >= 0, offsets, fallback)], matched


def _earlier_matches(seq_S: jax.Array, length: jax.Array, n: int) -> jax.Array:
  """bool_S: the starts j of earlier occurrences of the row's last n tokens whose continuation j + n exists (before
  the suffix's own last token)."""
  starts_S = jnp.arange(seq_S.shape[0])
  suffix_N = jax.lax.dynamic_slice_in_dim(seq_S, jnp.maximum(length - n, 0), n)
  match_S = jnp.ones(seq_S.shape, bool)
  for i in range(n):
    match_S &= jnp.roll(seq_S, -i) == suffix_N[i]
  return match_S & (starts_S + n < length) & (length >= n)
