"""Tree rounds end to end (`specjax.generate(..., tree=StaticTree(...))`): greedy equals autoregressive greedy token
for token with ragged prompts, and sampled trees keep the target's joint distribution of the first three tokens
(both branching modes; the chi-square harness of tests/test_rejection.py); clear errors for what cannot branch."""

import numpy as np
import pytest

import specjax
from specjax import drafters
from specjax.trees.static import StaticTree
from test_rejection import (ALPHA, N_TOKENS, PROMPT, SAMPLES, TARGET_CONFIG, VOCAB, chi_square_pvalue,
                            target_joint)

TREE = ((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0))


@pytest.fixture(scope="module")
def target():
  return specjax.init_model(TARGET_CONFIG, seed=3)


@pytest.fixture(scope="module")
def other_draft():
  """A draft that disagrees with the target often, so that second choices get accepted."""
  return drafters.DraftModel(specjax.init_model(TARGET_CONFIG, seed=11))


@pytest.mark.parametrize("branching", ["top_k", "sample"])
def test_greedy_tree_equals_autoregressive(target, other_draft, branching):
  prompts = [[1, 2, 3, 4, 5, 6, 7], [3, 1], [5, 5, 2, 7]]
  greedy = specjax.SamplingParams(temperature=0.0)
  want = specjax.generate(target, prompts, max_new_tokens=24, sampling=greedy, stop_at_eos=False)
  got = specjax.generate(target, prompts, max_new_tokens=24, sampling=greedy, stop_at_eos=False, drafter=other_draft,
                         tree=StaticTree(TREE, branching))
  assert got.tokens == want.tokens
  assert got.stats.rounds < 3 * 24


@pytest.mark.parametrize("branching,sampling", [
    ("top_k", specjax.SamplingParams(temperature=1.0)),
    ("sample", specjax.SamplingParams(temperature=1.0)),
    ("sample", specjax.SamplingParams(temperature=0.5, top_p=0.8)),
    ("top_k", specjax.SamplingParams(temperature=1.5, top_k=3)),
])
def test_tree_joint_distribution_equals_target(target, other_draft, branching, sampling):
  result = specjax.generate(target, [PROMPT] * SAMPLES, max_new_tokens=N_TOKENS, sampling=sampling, seed=5,
                            drafter=other_draft, stop_at_eos=False, tree=StaticTree(TREE, branching))
  seqs = np.array(result.tokens)
  counts = np.bincount(np.ravel_multi_index(seqs.T, [VOCAB] * N_TOKENS), minlength=VOCAB**N_TOKENS)
  assert chi_square_pvalue(counts, target_joint(target, PROMPT, sampling)) > ALPHA


def test_what_cannot_draft_a_tree_is_named(target, other_draft):
  tree = StaticTree(TREE)
  with pytest.raises(ValueError, match="needs a drafter"):
    specjax.generate(target, [PROMPT], max_new_tokens=4, tree=tree)
  with pytest.raises(ValueError, match="verifies its 7 nodes: leave k unset"):
    specjax.generate(target, [PROMPT], max_new_tokens=4, drafter=other_draft, k=4, tree=tree)
  with pytest.raises(TypeError, match="StaticTree or specjax.DynamicTree"):
    specjax.generate(target, [PROMPT], max_new_tokens=4, drafter=other_draft, tree=[(0,)])
