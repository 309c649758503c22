"""MedusaHeads: exact under the rejection sampler, greedy = autoregressive, K limited to the number of heads."""

import jax
import pytest

from specjax.drafters.medusa import MedusaConfig, MedusaHeads
from specjax.sampling import SamplingParams


def random_heads(target, vocab_ids=None, seed=0):
  """Heads with non-zero weights (a fresh head is zero: every head would equal the target's own head)."""
  config = MedusaConfig.for_target(target.config, n_heads=4, draft_vocab_size=len(vocab_ids or []))
  heads = MedusaHeads.create(target, config, vocab_ids=vocab_ids)
  key = jax.random.key(seed)
  return heads.with_net(jax.tree.map(lambda x: jax.random.normal(key, x.shape) * 0.5, heads.net))


@pytest.mark.parametrize("sampling,k,vocab_ids", [
    (SamplingParams(temperature=1.0, top_p=0.8), 4, None),
    (SamplingParams(temperature=1.5), 2, [1, 2, 3, 6]),
], ids=["full-vocab-T1-p0.8-K4", "draft-vocab-T1.5-K2"])
def test_exact(exactness_target, assert_exact, sampling, k, vocab_ids):
  stats = assert_exact(exactness_target, random_heads(exactness_target, vocab_ids), sampling, k, seed=21 + k)
  assert 0.0 < stats.acceptance_rate < 1.0


def test_greedy_is_autoregressive(exactness_target, assert_greedy_is_autoregressive):
  assert_greedy_is_autoregressive(exactness_target, random_heads(exactness_target, seed=1), k=3)


def test_k_is_at_most_the_number_of_heads(exactness_target):
  import specjax
  heads = MedusaHeads.create(exactness_target)
  assert heads.max_k == 4 and heads.feature_layers == ()
  with pytest.raises(ValueError, match="max_k"):
    specjax.generate(exactness_target, [[1, 2]], max_new_tokens=4, drafter=heads, k=5)
