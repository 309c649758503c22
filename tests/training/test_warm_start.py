"""Training on from a saved drafter (`init_from`): the objective starts at the saved parameters, in float32, with
the saved draft vocabulary; a saved drafter of another kind or shape is refused by name."""

import jax
import ml_collections
import numpy as np
import pytest

from specjax.training.export import save_drafter
from specjax.training.recipes import make_objective
from specjax.training.trainer import heldout_loss
from training.test_training import SETTINGS  # the tiny settings of every kind

KINDS = ["feature_head", "medusa", "layer_skip", "draft_model", "block_drafter"]


def _with(settings, **overrides):
  return ml_collections.ConfigDict(dict(settings.to_dict(), **overrides))


def _saved(kind, peaked_target, tiny_corpus, directory, dtype="bfloat16"):
  """A perturbed drafter of `kind` saved in `directory`; returns its objective's trainable parameters."""
  objective = make_objective(kind, peaked_target, SETTINGS[kind], tiny_corpus)
  key = jax.random.key(3)
  params = jax.tree.map(lambda x: x + 0.05 * jax.random.normal(key, x.shape, x.dtype), objective.trainable)
  save_drafter(objective.drafter(params), directory, dtype=dtype)
  return params


@pytest.mark.parametrize("kind", KINDS)
def test_training_goes_on_from_the_saved_parameters(peaked_target, tiny_corpus, tmp_path, kind):
  saved = _saved(kind, peaked_target, tiny_corpus, str(tmp_path / kind))
  warm = make_objective(kind, peaked_target, _with(SETTINGS[kind], init_from=str(tmp_path / kind)), tiny_corpus)
  for want, got in zip(jax.tree.leaves(saved), jax.tree.leaves(warm.trainable)):
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), np.asarray(want.astype("bfloat16"), np.float32))
  fresh = make_objective(kind, peaked_target, SETTINGS[kind], tiny_corpus)
  moved = [not np.allclose(a, b) for a, b in zip(jax.tree.leaves(fresh.trainable), jax.tree.leaves(warm.trainable))]
  assert any(moved)
  loss = heldout_loss(warm, tiny_corpus, warm.trainable, batch_size=4)["heldout_kl"]
  assert np.isfinite(loss)


def test_the_saved_draft_vocabulary_is_kept(peaked_target, tiny_corpus, tmp_path):
  _saved("feature_head", peaked_target, tiny_corpus, str(tmp_path / "head"))
  saved_vocab = make_objective("feature_head", peaked_target, SETTINGS.feature_head, tiny_corpus).frozen["vocab_ids"]
  other_corpus = tiny_corpus.__class__(**{**tiny_corpus.__dict__, "heldout": ~tiny_corpus.heldout})
  warm = make_objective("feature_head", peaked_target, _with(SETTINGS.feature_head, init_from=str(tmp_path / "head")),
                        other_corpus)
  np.testing.assert_array_equal(np.asarray(warm.frozen["vocab_ids"]), np.asarray(saved_vocab))


def test_another_kind_or_shape_is_refused(peaked_target, tiny_corpus, tmp_path):
  _saved("feature_head", peaked_target, tiny_corpus, str(tmp_path / "head"))
  with pytest.raises(ValueError, match="holds a feature_head drafter, not a medusa"):
    make_objective("medusa", peaked_target, _with(SETTINGS.medusa, init_from=str(tmp_path / "head")), tiny_corpus)
  for change in ({"n_layers": 2}, {"feature_layers": (0, 2)}, {"ffn_dim": 32}):
    settings = _with(SETTINGS.feature_head, init_from=str(tmp_path / "head"), **change)
    with pytest.raises(ValueError, match="another shape or target layers"):
      make_objective("feature_head", peaked_target, settings, tiny_corpus)
  with pytest.raises(ValueError, match="no shipped 'feature_head' drafter fits"):
    make_objective("feature_head", peaked_target, _with(SETTINGS.feature_head, init_from="shipped"), tiny_corpus)


def test_settings_the_shapes_do_not_show_must_match_too(peaked_target, tiny_corpus, tmp_path):
  """A block drafter saved at block_size 4 without previous_feature is refused by settings that differ only there."""
  _saved("block_drafter", peaked_target, tiny_corpus, str(tmp_path / "block"))
  for change in ({"block_size": 6}, {"previous_feature": True}):
    settings = _with(SETTINGS.block_drafter, init_from=str(tmp_path / "block"), **change)
    with pytest.raises(ValueError, match=f"holds a block_drafter with {next(iter(change))}"):
      make_objective("block_drafter", peaked_target, settings, tiny_corpus)
