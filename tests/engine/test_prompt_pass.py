"""The prompt pass: a bucket longer than PREFILL_CHUNK runs chunk by chunk, only as far as the longest prompt, and
gives what one call over the bucket gives (last hidden state, cache, features); generation through it is unchanged."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.cache import init_cache
from specjax.engine import round as round_lib

CONFIG = specjax.ModelConfig(vocab_size=32, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, ffn_dim=64,
                             max_seq_len=160)


@pytest.fixture(scope="module")
def target():
  return specjax.init_model(CONFIG, seed=7)


def _pass(target, tokens_BxS, prompt_len_B, bucket, chunk, monkeypatch):
  monkeypatch.setattr(round_lib, "PREFILL_CHUNK", chunk)
  run = jax.jit(lambda params, tokens, lengths: round_lib.prompt_pass(
      target.with_params(params).module(), tokens, lengths, init_cache(CONFIG, tokens.shape[0], tokens.shape[1]),
      bucket, (0, 2)))
  return run(target.params, tokens_BxS, prompt_len_B)


def test_chunks_give_what_one_call_gives(target, monkeypatch):
  tokens_BxS = jnp.asarray(np.random.default_rng(0).integers(1, 32, (3, 128)), jnp.int32)
  prompt_len_B = jnp.asarray([5, 37, 20], jnp.int32)   # the longest needs 3 chunks of 16 of the 64 bucket
  whole = _pass(target, tokens_BxS, prompt_len_B, 64, 128, monkeypatch)
  chunked = _pass(target, tokens_BxS, prompt_len_B, 64, 16, monkeypatch)
  np.testing.assert_allclose(chunked[0], whole[0], atol=1e-5)
  for row, n in enumerate([5, 37, 20]):
    np.testing.assert_allclose(chunked[1].k[:, row, :n], whole[1].k[:, row, :n], atol=1e-5)
    np.testing.assert_allclose(chunked[1].v[:, row, :n], whole[1].v[:, row, :n], atol=1e-5)
    np.testing.assert_allclose(chunked[2].layers_BxTxLxD[row, :n], whole[2].layers_BxTxLxD[row, :n], atol=1e-5)
  assert not np.asarray(chunked[1].k[:, :, 48:]).any()   # the fourth chunk never ran


def test_generation_through_chunks_is_unchanged(target, monkeypatch):
  prompts = [[1, 2, 3] * 13, [4, 5], list(range(1, 30))]
  greedy = specjax.SamplingParams(temperature=0.0)
  whole = specjax.generate(target, prompts, max_new_tokens=8, sampling=greedy).tokens
  monkeypatch.setattr(round_lib, "PREFILL_CHUNK", 16)
  jax.clear_caches()
  assert specjax.generate(target, prompts, max_new_tokens=8, sampling=greedy).tokens == whole
  jax.clear_caches()
