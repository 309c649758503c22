"""FeatureHead: exact under the rejection sampler, greedy = autoregressive, and its training forward (the
training-time test) computes exactly what `propose` computes step by step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.drafters.base import TargetFeatures
from specjax.drafters.feature_head import FeatureHead, FeatureHeadConfig
from specjax.drafters.vocab_head import embed_tokens, head_logits
from specjax.engine import target_features
from specjax.cache import init_cache
from specjax.policy import SpeculationPolicy
from specjax.sampling import SamplingParams


@pytest.mark.parametrize("sampling,k,vocab_ids", [
    (SamplingParams(temperature=1.0), 3, None),
    (SamplingParams(temperature=0.7, top_k=3), 2, [0, 2, 5, 7]),
], ids=["full-vocab-T1-K3", "draft-vocab-T0.7-topk3-K2"])
def test_exact(exactness_target, assert_exact, sampling, k, vocab_ids):
  config = FeatureHeadConfig.for_target(exactness_target.config, draft_vocab_size=len(vocab_ids or []))
  head = FeatureHead.create(exactness_target, config, seed=1, vocab_ids=vocab_ids)
  stats = assert_exact(exactness_target, head, sampling, k, seed=11 + k)
  assert 0.0 < stats.acceptance_rate < 1.0


@pytest.mark.parametrize("n_layers", [1, 2])
def test_greedy_is_autoregressive(exactness_target, assert_greedy_is_autoregressive, n_layers):
  config = FeatureHeadConfig.for_target(exactness_target.config, n_layers=n_layers)
  assert_greedy_is_autoregressive(exactness_target, FeatureHead.create(exactness_target, config, seed=2), k=4)


def test_greedy_is_autoregressive_under_the_adaptive_policy(exactness_target, assert_greedy_is_autoregressive):
  """K changes between rounds (K = 0 rounds call observe): the head's state does not depend on K."""
  policy = SpeculationPolicy(ks=(1, 3), probe_interval=1, prior_alpha=0.0)
  assert_greedy_is_autoregressive(exactness_target, FeatureHead.create(exactness_target, seed=2), k=policy)


@pytest.mark.parametrize("n_layers", [1, 2])
def test_training_forward_is_the_drafting_computation(n_layers):
  """unrolled() at chain p = n - 1 gives the q that propose() drew each draft from (drafts fed back as tokens)."""
  config = specjax.ModelConfig(vocab_size=48, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, ffn_dim=64,
                               max_seq_len=128)
  target = specjax.init_model(config, seed=0)
  head = FeatureHead.create(target, FeatureHeadConfig.for_target(config, n_layers=n_layers), seed=3)
  params = head.params()
  n, k, size = 11, 4, 32
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 48, (2, size)), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(size, dtype=jnp.int32), (2, size))
  _, _, features = target_features(target.module(), tokens, positions, init_cache(config, 2, size),
                                   head.feature_layers)
  prompt = TargetFeatures(hidden_BxTxD=features.hidden_BxTxD[:, :16], layers_BxTxLxD=features.layers_BxTxLxD[:, :16])
  # prompt of n - 1 tokens (bucket 16), the first generated token at n - 1: seq_len n.
  state = head.init(params, tokens, jnp.full((2,), n - 1, jnp.int32), 16, features=prompt)
  keys = jax.random.split(jax.random.key(0), 2)
  draft, q, _ = head.propose(params, state, tokens, jnp.full((2,), n, jnp.int32), k, SamplingParams(), keys)

  net = head.module(params["net"])
  fused = net.fused(features.layers_BxTxLxD[:, :n])
  shifted = jnp.pad(fused[:, :-1], ((0, 0), (1, 0), (0, 0)))
  step_tokens = [tokens[:, :n]] + [tokens[:, :n].at[:, n - 1].set(draft[:, s]) for s in range(k - 1)]
  outs = net.unrolled(shifted, [embed_tokens(params["frozen"], t) for t in step_tokens])
  for s, out in enumerate(outs):
    expected = jax.nn.softmax(head_logits(params["frozen"], net.out_norm(out[:, n - 1])), axis=-1)
    np.testing.assert_allclose(np.asarray(q[:, s]), np.asarray(expected), atol=2e-5)


def test_static_identity_and_bad_layers(exactness_target):
  a, b = FeatureHead.create(exactness_target, seed=0), FeatureHead.create(exactness_target, seed=1)
  assert a == b and hash(a) == hash(b)
  assert a.feature_layers == (0, 1)
  with pytest.raises(ValueError, match="feature_layers"):
    FeatureHeadConfig.for_target(exactness_target.config, feature_layers=(0, 5))
  with pytest.raises(ValueError, match="vocab_ids"):
    FeatureHead.create(exactness_target, FeatureHeadConfig.for_target(exactness_target.config, draft_vocab_size=4))
  with pytest.raises(ValueError, match="n_layers must be at least 1"):
    FeatureHeadConfig.for_target(exactness_target.config, n_layers=0)


@pytest.mark.parametrize("n_layers", [1, 2])
def test_state_after_rounds_equals_a_fresh_prefill(assert_state_is_a_fresh_prefill, n_layers):
  """Rounds of any K (K = 0: observe) and any acceptance counts leave the state a fresh prefill would have."""
  config = specjax.ModelConfig(vocab_size=48, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, ffn_dim=64,
                               max_seq_len=128)
  target = specjax.init_model(config, seed=1)
  head_config = FeatureHeadConfig.for_target(config, n_layers=n_layers)
  assert_state_is_a_fresh_prefill(target, FeatureHead.create(target, head_config, seed=4))
