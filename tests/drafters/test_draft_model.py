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
