"""The frozen target head restricted to a draft vocabulary: zero q outside it, and how the vocabulary is chosen."""

import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.drafters.vocab_head import frozen_head, full_vocab_logits, head_logits, most_frequent_tokens, output_matrix
from specjax.sampling import SamplingParams, distribution


def test_restricted_head_matches_the_target_on_its_tokens():
  config = specjax.ModelConfig(vocab_size=16, d_model=8, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=16,
                               max_seq_len=32, tie_embeddings=False)
  target = specjax.init_model(config)
  hidden = jnp.ones((2, config.d_model))
  full = target.module().logits(hidden)
  frozen = frozen_head(target, [1, 4, 9])
  logits = full_vocab_logits(frozen, head_logits(frozen, hidden))
  np.testing.assert_allclose(np.asarray(logits[:, [1, 4, 9]]), np.asarray(full[:, [1, 4, 9]]), rtol=1e-5)
  q = distribution(logits, SamplingParams(temperature=0.8, top_k=2))
  assert float(q[:, [0, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15]].sum()) == 0.0
  np.testing.assert_allclose(np.asarray(q.sum(-1)), 1.0, rtol=1e-6)
  assert output_matrix(target).shape == (16, 8)
  with pytest.raises(ValueError, match="distinct"):
    frozen_head(target, [1, 1])


def test_most_frequent_tokens_breaks_ties_with_a_broader_count():
  counts = np.array([5, 0, 0, 3, 0, 0])
  assert most_frequent_tokens(counts, 3).tolist() == [0, 1, 3]
  assert most_frequent_tokens(counts, 3, tie_break_V=[0, 0, 0, 0, 0, 9]).tolist() == [0, 3, 5]
  assert most_frequent_tokens(counts, 2, always=(4,)).tolist() == [0, 4]
