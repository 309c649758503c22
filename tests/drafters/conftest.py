"""The core's exactness test (tests/test_rejection.py) applied to each drafter: the joint distribution of the
first generated tokens under speculative decoding is chi-square tested against the target's exact one."""

import pytest

import specjax
import test_rejection as rejection  # tests/ is on pytest's pythonpath (tests/pytest.ini)


@pytest.fixture(scope="session")
def exactness_target():
  """The tiny random target of the core's exactness test (vocabulary 8, untied head)."""
  return specjax.init_model(rejection.TARGET_CONFIG, seed=3)


@pytest.fixture(scope="session")
def assert_exact():
  """assert_exact(target, drafter, sampling, k, seed) -> stats; fails when the output distribution is not p's."""

  def check(target, drafter, sampling, k, seed):
    counts, stats = rejection.sampled_joint(target, drafter, sampling, k, seed=seed)
    probs = rejection.target_joint(target, rejection.PROMPT, sampling)
    assert rejection.chi_square_pvalue(counts, probs) > rejection.ALPHA
    return stats

  return check


@pytest.fixture(scope="session")
def assert_greedy_is_autoregressive():
  """Greedy speculative decoding must emit exactly the target's greedy tokens, rows of different lengths."""

  def check(target, drafter, k):
    prompts = [[1, 2, 3, 1, 2], [4, 5, 6, 7, 0, 1, 2, 3, 4], [3]]
    greedy = specjax.SamplingParams(temperature=0.0)
    ar = specjax.generate(target, prompts, max_new_tokens=12, sampling=greedy, stop_at_eos=False)
    spec = specjax.generate(target, prompts, max_new_tokens=12, sampling=greedy, drafter=drafter, k=k,
                            stop_at_eos=False)
    assert spec.tokens == ar.tokens
    return spec.stats

  return check
