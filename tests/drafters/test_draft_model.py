"""DraftModel: any depth, width and head count; the same vocabulary is required."""

import pytest

import specjax
from specjax.drafters import DraftModel
from specjax.drafters import truncated_model

CONFIG = specjax.ModelConfig(vocab_size=32, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, ffn_dim=64,
                             max_seq_len=128)


def test_drafters_hash_by_static_content():
  model = specjax.init_model(CONFIG)
  assert DraftModel(model) == DraftModel(specjax.init_model(CONFIG, seed=5))
  assert hash(DraftModel(model)) == hash(DraftModel(specjax.init_model(CONFIG, seed=5)))
  assert DraftModel(model) != DraftModel(truncated_model(model, 1))


def test_truncated_model_keeps_the_first_layers():
  model = specjax.init_model(CONFIG)
  small = truncated_model(model, 2)
  assert small.config.n_layers == 2
  assert set(small.flat_params()) < set(model.flat_params())
  with pytest.raises(ValueError, match="n_layers"):
    truncated_model(model, 4)


def test_non_model_is_rejected():
  with pytest.raises(TypeError, match="Model"):
    DraftModel("smollm2-135m")


def test_catch_up_takes_in_what_a_prefill_would():
  """Autoregressive steps may leave a draft model behind; its catch-up, in chunks and ragged across rows, leaves
  the cache a prefill of the same tokens would (rows re-taking positions they hold change nothing)."""
  import jax.numpy as jnp
  import numpy as np

  draft = DraftModel(specjax.init_model(CONFIG, seed=2))
  assert draft.catches_up
  params = draft.params()
  tokens_BxS = jnp.asarray(np.random.default_rng(0).integers(0, CONFIG.vocab_size, (2, 32)), jnp.int32)
  lengths_B = jnp.asarray([16, 16], jnp.int32)
  full = draft.init(params, tokens_BxS, lengths_B, 16)
  cache = draft.init(params, tokens_BxS, lengths_B, 8)
  for row0, row1 in ((8, 4), (12, 8), (12, 12)):
    positions_BxC = jnp.asarray([range(row0, row0 + 4), range(row1, row1 + 4)], jnp.int32)
    cache = draft.catch_up(params, cache, tokens_BxS, positions_BxC)
  np.testing.assert_allclose(np.asarray(cache.k[:, :, :16]), np.asarray(full.k[:, :, :16]), atol=1e-5)
  np.testing.assert_allclose(np.asarray(cache.v[:, :, :16]), np.asarray(full.v[:, :, :16]), atol=1e-5)
