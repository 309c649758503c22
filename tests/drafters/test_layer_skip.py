"""LayerSkip: the target's first N layers (shared arrays) with an optional exit adapter; exact and greedy-exact."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.drafters import DraftModel, truncated_model
from specjax.drafters.layer_skip import LayerSkip, default_exit_layers
from specjax.sampling import SamplingParams


def with_random_adapter(skip, seed=0):
  key = jax.random.key(seed)
  return skip.with_adapter(jax.tree.map(lambda x: x + jax.random.normal(key, x.shape) * 0.3, skip.adapter))


def test_exact_with_adapter(exactness_target, assert_exact):
  skip = with_random_adapter(LayerSkip.create(exactness_target, n_layers=1, adapter_rank=8))
  stats = assert_exact(exactness_target, skip, SamplingParams(temperature=1.5, top_k=3), k=2, seed=31)
  assert 0.0 < stats.acceptance_rate < 1.0


def test_greedy_is_autoregressive(exactness_target, assert_greedy_is_autoregressive):
  skip = with_random_adapter(LayerSkip.create(exactness_target, n_layers=1, adapter_rank=8), seed=1)
  assert_greedy_is_autoregressive(exactness_target, skip, k=4)


def test_shares_the_targets_layers_and_stores_only_the_adapter(exactness_target):
  skip = LayerSkip.create(exactness_target, n_layers=1, adapter_rank=8)
  target_q = exactness_target.flat_params()["layers.0.attn.q.kernel"]
  assert skip.model.flat_params()["layers.0.attn.q.kernel"] is target_q
  assert np.allclose(skip.adapter["up"]["kernel"][...], 0)  # untrained adapter: the plain early exit
  plain = LayerSkip.create(exactness_target, n_layers=1)
  assert plain.adapter is None and plain == DraftModel(truncated_model(exactness_target, 1))
  assert skip != plain
  with pytest.raises(ValueError, match="n_layers"):
    LayerSkip.create(exactness_target, n_layers=3)


def test_untrained_adapter_is_the_plain_early_exit(exactness_target):
  skip = LayerSkip.create(exactness_target, n_layers=1, adapter_rank=8)
  hidden = jax.random.normal(jax.random.key(0), (2, 3, exactness_target.config.d_model))
  with_adapter = skip.model.module().logits(hidden)
  plain = truncated_model(exactness_target, 1).module().logits(hidden)
  np.testing.assert_allclose(np.asarray(with_adapter), np.asarray(plain), atol=1e-6)
  assert jnp.all(jnp.isfinite(with_adapter))


def test_default_depth_is_a_quarter_of_the_target_rounded_up(exactness_target):
  assert [default_exit_layers(n) for n in (1, 2, 4, 5, 30)] == [1, 1, 1, 2, 8]
  assert LayerSkip.create(exactness_target).n_layers == default_exit_layers(exactness_target.config.n_layers)
