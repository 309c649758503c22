"""The paired verification cost on a tiny random model: medians of alternated calls, and clear errors."""

import pytest

from specjax import ModelConfig, init_model
from specjax.benchmark.verify_cost import paired_verify_cost

TINY = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=128)


def test_paired_verify_cost_times_both_calls():
  cost = paired_verify_cost(init_model(TINY), batch=2, k=3, filled=20, cache_size=64, calls=3)
  assert (cost["batch_size"], cost["k"], cost["filled"]) == (2, 3, 20)
  assert cost["step_ms"] > 0 and cost["verify_ms"] > 0 and cost["ratio"] > 0


def test_paired_verify_cost_rejects_bad_settings():
  model = init_model(TINY)
  with pytest.raises(ValueError, match="exceed the cache size"):
    paired_verify_cost(model, batch=1, k=4, filled=60, cache_size=64, calls=1)
  with pytest.raises(ValueError, match="calls, k, batch >= 1"):
    paired_verify_cost(model, batch=1, k=4, filled=10, cache_size=64, calls=0)
