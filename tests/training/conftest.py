"""A tiny target with peaked distributions (a random one is nearly uniform, leaving no KL to lower) and a small
corpus of its on-policy text plus standard-library docstrings, shared by the training tests."""

import pytest

import specjax
from specjax.model import model_from_flat_params
from specjax.training.corpus import CorpusConfig
from specjax.training.data import build_corpus

CONFIG = specjax.ModelConfig(vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, ffn_dim=64,
                             max_seq_len=256, tie_embeddings=False)
CORPUS = CorpusConfig(n_prompts=8, max_new_tokens=24, generate_batch=8, temperature=1.0, stdlib_sequences=24,
                      seq_len=48, heldout_fraction=0.25, seed=0)


@pytest.fixture(scope="session")
def peaked_target():
  flat = specjax.init_model(CONFIG, seed=4).flat_params()
  flat["head.kernel"] = flat["head.kernel"] * 6.0
  return model_from_flat_params(CONFIG, flat)


@pytest.fixture(scope="session")
def tiny_corpus(peaked_target):
  return build_corpus(peaked_target, CORPUS, layer_ids=(0, 1, 2))


@pytest.fixture(scope="session")
def tiny_corpus_config():
  return CORPUS
