"""The core's exactness test (tests/test_rejection.py) applied to each drafter: the joint distribution of the
first generated tokens under speculative decoding is chi-square tested against the target's exact one."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.cache import init_cache
from specjax.drafters.base import TargetFeatures
from specjax.engine import target_features
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


@pytest.fixture(scope="session")
def assert_state_is_a_fresh_prefill():
  """check(target, drafter): rounds of any K (K = 0: observe, as the adaptive policy runs them) and any acceptance
  counts leave a feature-reading drafter the state a fresh prefill of the committed sequence would give it: the
  next proposals' q match."""

  def check(target, drafter):
    params, size, vocab = drafter.params(), 64, target.config.vocab_size
    sampling = specjax.SamplingParams(temperature=1.0)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, vocab, (2, size)).astype(np.int32)
    positions = jnp.broadcast_to(jnp.arange(size, dtype=jnp.int32), (2, size))
    forward = jax.jit(lambda t: target_features(target.module(), t, positions, init_cache(target.config, 2, size),
                                                drafter.feature_layers)[2])

    def fresh(seq_len_B):  # prefill of seq_len - 1 prompt tokens, as the engine does after its first token
      features = forward(jnp.asarray(tokens))
      prompt = TargetFeatures(hidden_BxTxD=features.hidden_BxTxD[:, :32],
                              layers_BxTxLxD=features.layers_BxTxLxD[:, :32])
      return drafter.init(params, jnp.asarray(tokens), seq_len_B - 1, 32, features=prompt)

    keys = jax.random.split(jax.random.key(0), 2)
    seq_len = np.array([6, 9], np.int32)
    state = fresh(jnp.asarray(seq_len))
    for k, n_accepted in ((3, [3, 0]), (0, [0, 0]), (2, [1, 2]), (4, [0, 4]), (0, [0, 0]), (1, [1, 1])):
      if k:
        draft, _, state = drafter.propose(params, state, jnp.asarray(tokens), jnp.asarray(seq_len), k, sampling, keys)
        for b in range(2):  # the verify call sees every draft
          tokens[b, seq_len[b]:seq_len[b] + k] = np.asarray(draft[b])
      else:
        state = drafter.observe(params, state, jnp.asarray(tokens), jnp.asarray(seq_len))
      features = forward(jnp.asarray(tokens))
      verified = TargetFeatures(**{name: jnp.stack([getattr(features, name)[b, seq_len[b] - 1:seq_len[b] + k]
                                                    for b in range(2)]) for name in ("hidden_BxTxD", "layers_BxTxLxD")})
      for b in range(2):  # drafts after the accepted ones are replaced: a correction token, then anything
        tokens[b, seq_len[b] + n_accepted[b]:] = rng.integers(0, vocab, size - seq_len[b] - n_accepted[b])
      seq_len = seq_len + np.asarray(n_accepted, np.int32) + 1
      state = drafter.commit(params, state, jnp.asarray(n_accepted), jnp.asarray(seq_len), features=verified)
    _, q_rounds, _ = drafter.propose(params, state, jnp.asarray(tokens), jnp.asarray(seq_len), 3, sampling, keys)
    _, q_fresh, _ = drafter.propose(params, fresh(jnp.asarray(seq_len)), jnp.asarray(tokens), jnp.asarray(seq_len), 3,
                                    sampling, keys)
    np.testing.assert_allclose(np.asarray(q_rounds), np.asarray(q_fresh), atol=2e-5)

  return check
