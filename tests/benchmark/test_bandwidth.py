"""The bandwidth bound: bytes per decode step and the tokens/s they allow."""

import pytest

import specjax
from specjax.benchmark import bandwidth

CONFIG = specjax.ModelConfig(vocab_size=100, d_model=16, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=32,
                             max_seq_len=64)


def test_bytes_per_step_counts_parameters_and_the_filled_cache():
  # 2 layers x (K and V) x 10 positions x 1 kv head x 8 dims x 4 bytes = 1280 bytes per row
  assert bandwidth.decode_bytes_per_step(1000, CONFIG, batch=3, mean_context=10) == 1000 + 3 * 1280


def test_bound_scales_with_bandwidth_and_batch():
  one = bandwidth.bound_tokens_per_s(10**6, CONFIG, 1, 0, bandwidth_gbs=1.0)
  assert one == pytest.approx(1000.0)
  assert bandwidth.bound_tokens_per_s(10**6, CONFIG, 1, 0, bandwidth_gbs=2.0) == pytest.approx(2000.0)
  assert bandwidth.bound_tokens_per_s(10**6, CONFIG, 4, 0, bandwidth_gbs=1.0) == pytest.approx(4000.0)


def test_copy_bandwidth_is_measured():
  assert bandwidth.copy_bandwidth_gbs(n_bytes=16 * 2**20, repeats=2) > 0.1
