"""Drafters named in configs: every kind the scripts accept, and clear errors for the rest."""

import pytest

import specjax
from specjax import drafters
from specjax.cli import drafter_from_config

CONFIG = specjax.ModelConfig(vocab_size=32, d_model=16, n_layers=3, n_heads=2, n_kv_heads=1, ffn_dim=32,
                             max_seq_len=64)


@pytest.fixture(scope="module")
def target():
  return specjax.init_model(CONFIG, seed=0)


def test_every_kind_builds(target):
  assert drafter_from_config("none", target) is None
  assert isinstance(drafter_from_config("prompt_lookup", target), drafters.PromptLookup)
  assert drafter_from_config("draft_model", target, "truncate:1").model.config.n_layers == 1
  skip = drafter_from_config("layer_skip", target, "2")
  assert isinstance(skip, drafters.LayerSkip) and skip.n_layers == 2
  assert isinstance(drafter_from_config("medusa", target, "untrained"), drafters.MedusaHeads)
  assert isinstance(drafter_from_config("feature_head", target, "untrained"), drafters.FeatureHead)


def test_heads_need_a_trained_directory(target, tmp_path):
  with pytest.raises(ValueError, match="needs draft_source"):
    drafter_from_config("feature_head", target, "")
  with pytest.raises(ValueError, match="not a trained drafter"):
    drafter_from_config("medusa", target, str(tmp_path))
  with pytest.raises(ValueError, match="unknown drafter"):
    drafter_from_config("eagle9", target)


def test_trees_from_strings():
  from specjax.cli import tree_from_string
  assert tree_from_string("") is None
  assert tree_from_string("dynamic:16,8,4") == specjax.DynamicTree(16, 8, 4)
  assert tree_from_string("static:6,2") == specjax.StaticTree.balanced(6, 2)
  for bad, message in (("beam:4", "tree must be"), ("dynamic:16,8", "dynamic:N,DEPTH,TOP_K"),
                       ("static:x,2", "static:N,WIDTH"), ("dynamic:999,8,4", "exceeds")):
    with pytest.raises(ValueError, match=message):
      tree_from_string(bad)
