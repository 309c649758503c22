"""Trained drafters round-trip through disk (only trained arrays stored) and load through the CLI's kinds."""

import jax
import ml_collections
import numpy as np
import pytest

import specjax
from specjax.cli import drafter_from_config
from specjax.training.export import load_drafter, save_drafter
from specjax.training.recipes import make_objective

SETTINGS = ml_collections.ConfigDict(dict(
    feature_head=dict(feature_layers=(), ffn_dim=0, draft_vocab_size=40, ttt_steps=2, step_decay=0.8,
                      feature_weight=0.0, top1_weight=0.0),
    medusa=dict(n_heads=2, draft_vocab_size=0, step_decay=0.8),
    layer_skip=dict(n_layers=2, adapter_rank=8, loss_vocab_size=0),
    block_drafter=dict(feature_layers=(), n_layers=2, ffn_dim=0, draft_vocab_size=40, block_size=4, gamma=4.0,
                       anchors=4, ce_weight=1.0, kl_weight=0.0, start_from_target=False,
                       previous_feature=False),
))


def _perturbed(objective):
  key = jax.random.key(7)
  return objective.drafter(jax.tree.map(lambda x: x + 0.1 * jax.random.normal(key, x.shape), objective.trainable))


@pytest.mark.parametrize("kind,overrides", [("feature_head", {}), ("feature_head", {"n_layers": 2}), ("medusa", {}),
                                            ("layer_skip", {}), ("block_drafter", {})])
def test_save_load_round_trip(peaked_target, tiny_corpus, tmp_path, kind, overrides):
  settings = ml_collections.ConfigDict(dict(SETTINGS[kind].to_dict(), **overrides))
  drafter = _perturbed(make_objective(kind, peaked_target, settings, tiny_corpus))
  directory = save_drafter(drafter, str(tmp_path / kind))
  loaded = drafter_from_config(kind, peaked_target, directory)
  assert loaded == drafter and type(loaded) is type(drafter)
  for a, b in zip(jax.tree.leaves(drafter.params()), jax.tree.leaves(loaded.params())):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  greedy = specjax.SamplingParams(temperature=0.0)
  runs = [specjax.generate(peaked_target, [[1, 2, 3]], max_new_tokens=6, sampling=greedy, drafter=d, k=2)
          for d in (drafter, loaded)]
  assert runs[0].stats.accepted_per_round == runs[1].stats.accepted_per_round


def test_wrong_or_missing_directories(peaked_target, tiny_corpus, tmp_path):
  with pytest.raises(ValueError, match="drafter.json is missing"):
    load_drafter(str(tmp_path), peaked_target)
  drafter = _perturbed(make_objective("medusa", peaked_target, SETTINGS.medusa, tiny_corpus))
  directory = save_drafter(drafter, str(tmp_path / "medusa"), dtype="bfloat16")
  with pytest.raises(ValueError, match="not a FeatureHead"):
    drafter_from_config("feature_head", peaked_target, directory)
  other = specjax.init_model(peaked_target.config.replace(d_model=48, n_heads=4, n_kv_heads=2))
  with pytest.raises(ValueError, match="d_model"):
    load_drafter(directory, other)
  assert drafter_from_config("layer_skip", peaked_target, "2").adapter is None
