"""Training lowers the held-out KL for every trainable drafter; checkpoints resume exactly and refuse bad input."""

import dataclasses
import json
import os

import jax
import ml_collections
import numpy as np
import pytest

from specjax.training.data import build_corpus
from specjax.training.recipes import make_objective
from specjax.training.trainer import TrainConfig, heldout_loss, train

SETTINGS = ml_collections.ConfigDict(dict(
    feature_head=dict(feature_layers=(0, 1, 2), ffn_dim=64, draft_vocab_size=48, ttt_steps=2, step_decay=0.8,
                      feature_weight=0.1, top1_weight=0.5),
    medusa=dict(n_heads=3, draft_vocab_size=0, step_decay=0.8),
    layer_skip=dict(n_layers=1, adapter_rank=16, loss_vocab_size=48),
    draft_model=dict(init="truncate:1", train_embeddings=True, loss_vocab_size=0),
    block_drafter=dict(feature_layers=(0, 2), n_layers=1, ffn_dim=64, draft_vocab_size=48, block_size=4, gamma=4.0,
                       anchors=8, ce_weight=1.0, kl_weight=1.0, start_from_target=False, previous_feature=False),
))
QUICK = TrainConfig(steps=40, batch_size=4, learning_rate=1e-2, warmup_steps=4, checkpoint_every=20, log_every=10)


@pytest.mark.parametrize("kind", ["feature_head", "medusa", "layer_skip", "draft_model", "block_drafter"])
def test_training_lowers_heldout_kl(peaked_target, tiny_corpus, tmp_path, kind):
  objective = make_objective(kind, peaked_target, SETTINGS[kind], tiny_corpus)
  before = heldout_loss(objective, tiny_corpus, objective.trainable, QUICK.batch_size)["heldout_kl"]
  trained, after = train(objective, tiny_corpus, QUICK, str(tmp_path), progress=False)
  assert after["heldout_kl"] < 0.9 * before, (before, after)
  with open(tmp_path / "metrics.jsonl") as f:
    steps = [json.loads(line)["step"] for line in f]
  assert steps[0] == 0 and steps[-1] == QUICK.steps
  objective.drafter(trained)  # the trained parameters make a drafter


@pytest.mark.parametrize("previous_feature", [False, True], ids=["", "previous-feature"])
def test_block_drafter_started_from_the_target_trains(peaked_target, tiny_corpus, tmp_path, previous_feature):
  """start_from_target: the objective starts at the target's last layer and trains from there (with or without the
  previous position's features in the block's first input)."""
  settings = ml_collections.ConfigDict(dict(SETTINGS.block_drafter, start_from_target=True,
                                            previous_feature=previous_feature))
  objective = make_objective("block_drafter", peaked_target, settings, tiny_corpus)
  drafter = objective.drafter(objective.trainable)
  assert drafter.config.previous_feature == previous_feature
  layer = drafter.module(drafter.net).layers[0]
  np.testing.assert_array_equal(np.asarray(layer.attn.q.kernel[...]),
                                np.asarray(peaked_target.flat_params()["layers.2.attn.q.kernel"]))
  before = heldout_loss(objective, tiny_corpus, objective.trainable, QUICK.batch_size)["heldout_kl"]
  _, after = train(objective, tiny_corpus, QUICK, str(tmp_path), progress=False)
  assert after["heldout_kl"] < 0.9 * before, (before, after)


def _medusa(peaked_target, tiny_corpus):
  return make_objective("medusa", peaked_target, SETTINGS.medusa, tiny_corpus)


def test_interrupted_and_resumed_equals_uninterrupted(peaked_target, tiny_corpus, tmp_path):
  config = TrainConfig(steps=7, batch_size=4, learning_rate=1e-2, warmup_steps=2, checkpoint_every=2, log_every=1)
  objective = _medusa(peaked_target, tiny_corpus)
  whole, _ = train(objective, tiny_corpus, config, str(tmp_path / "whole"), progress=False)
  # Interrupted after 5 steps: the checkpoint of step 4 is the latest; step 5 is lost and redone on resume.
  train(objective, tiny_corpus, config, str(tmp_path / "parts"), stop_after=5, progress=False)
  assert sorted(os.listdir(tmp_path / "parts" / "checkpoints"))[-1] == "4"
  resumed, _ = train(objective, tiny_corpus, config, str(tmp_path / "parts"), progress=False)
  for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  with open(tmp_path / "parts" / "metrics.jsonl") as f:
    steps = [json.loads(line)["step"] for line in f]
  assert steps == sorted(steps) and len([s for s in steps if s == 5]) == 1


def test_mismatched_checkpoint_is_refused(peaked_target, tiny_corpus, tmp_path):
  config = TrainConfig(steps=2, batch_size=4, checkpoint_every=1, log_every=1)
  train(_medusa(peaked_target, tiny_corpus), tiny_corpus, config, str(tmp_path), progress=False)
  other = TrainConfig(steps=2, batch_size=4, learning_rate=5e-4, checkpoint_every=1, log_every=1)
  with pytest.raises(ValueError, match="different run.*train"):
    train(_medusa(peaked_target, tiny_corpus), tiny_corpus, other, str(tmp_path), progress=False)
  layer_skip = make_objective("layer_skip", peaked_target, SETTINGS.layer_skip, tiny_corpus)
  with pytest.raises(ValueError, match="different run"):
    train(layer_skip, tiny_corpus, config, str(tmp_path), progress=False)


def test_corrupt_checkpoint_is_refused(peaked_target, tiny_corpus, tmp_path):
  config = TrainConfig(steps=2, batch_size=4, checkpoint_every=1, log_every=1)
  train(_medusa(peaked_target, tiny_corpus), tiny_corpus, config, str(tmp_path), progress=False)
  state_dir = tmp_path / "checkpoints" / "2" / "state"
  for root, _, files in os.walk(state_dir):
    for name in files:
      with open(os.path.join(root, name), "wb") as f:
        f.write(b"not a checkpoint")
  with pytest.raises(ValueError, match="corrupt"):
    train(_medusa(peaked_target, tiny_corpus), tiny_corpus, config, str(tmp_path), progress=False)


def test_objectives_use_the_layers_they_declare(peaked_target, tiny_corpus):
  assert make_objective("layer_skip", peaked_target, SETTINGS.layer_skip, tiny_corpus).layer_ids == (0,)
  assert make_objective("feature_head", peaked_target, SETTINGS.feature_head, tiny_corpus).layer_ids == (0, 1, 2)
  assert make_objective("block_drafter", peaked_target, SETTINGS.block_drafter, tiny_corpus).layer_ids == (0, 2)
  with pytest.raises(ValueError, match="nothing to train"):
    make_objective("layer_skip", peaked_target, ml_collections.ConfigDict(dict(SETTINGS.layer_skip, adapter_rank=0)),
                   tiny_corpus)


def test_bf16_gemm_steps_train_as_the_float32_ones_do(peaked_target, tiny_corpus, tmp_path):
  """`bf16_gemm=True` rounds the step's large products' operands (the parameters end elsewhere) yet lowers the
  held-out KL as far; a run is resumed only at the precision it was started with."""
  objective = make_objective("feature_head", peaked_target, SETTINGS.feature_head, tiny_corpus)
  before = heldout_loss(objective, tiny_corpus, objective.trainable, QUICK.batch_size)["heldout_kl"]
  exact, exact_after = train(objective, tiny_corpus, QUICK, str(tmp_path / "float32"), progress=False)
  bf16 = TrainConfig(**dict(vars(QUICK), bf16_gemm=True))
  fast, fast_after = train(objective, tiny_corpus, bf16, str(tmp_path / "bf16"), progress=False)
  assert any(not np.array_equal(np.asarray(a), np.asarray(b))
             for a, b in zip(jax.tree.leaves(exact), jax.tree.leaves(fast)))
  assert fast_after["heldout_kl"] < 0.9 * before
  assert abs(fast_after["heldout_kl"] - exact_after["heldout_kl"]) < 0.1 * exact_after["heldout_kl"]
  with pytest.raises(ValueError, match="different run.*train"):
    train(objective, tiny_corpus, bf16, str(tmp_path / "float32"), progress=False)


@pytest.fixture(scope="module")
def with_long_part(peaked_target, tiny_corpus, tiny_corpus_config):
  """The tiny corpus with a long part: rows of 96 tokens (on-policy text and docstrings, as rows of another length)."""
  long = build_corpus(peaked_target, dataclasses.replace(tiny_corpus_config, n_prompts=4, stdlib_sequences=8, seq_len=96),
                      layer_ids=(0, 1, 2))
  return dataclasses.replace(tiny_corpus, long=long)


def test_every_long_every_th_step_reads_the_long_part(with_long_part):
  config = TrainConfig(batch_size=4, long_every=3, long_batch_size=2)
  rows, long_rows = with_long_part.epoch_rows(), with_long_part.long.epoch_rows()
  shapes = [config.step_batch(with_long_part, rows, long_rows, step, (1,))["tokens"].shape for step in range(6)]
  assert shapes == [(4, 48), (4, 48), (2, 96), (4, 48), (4, 48), (2, 96)]
  for bad in (dict(long_every=-1), dict(long_batch_size=0)):
    with pytest.raises(ValueError, match="long_every must be >= 0 and long_batch_size >= 1"):
      TrainConfig(**bad)


def test_training_with_the_long_part_resumes_exactly_and_reports_it(peaked_target, tiny_corpus, with_long_part,
                                                                     tmp_path):
  config = TrainConfig(steps=7, batch_size=4, learning_rate=1e-2, warmup_steps=2, checkpoint_every=2, log_every=1,
                       long_every=2)
  objective = make_objective("feature_head", peaked_target, SETTINGS.feature_head, tiny_corpus)
  whole, final = train(objective, with_long_part, config, str(tmp_path / "whole"), progress=False)
  assert {"heldout_kl", "heldout_long_kl", "heldout_long_loss"} <= set(final)
  assert {k for k in final if k.startswith("heldout_long_")} == {k.replace("heldout_", "heldout_long_") for k in final
                                                                  if not k.startswith("heldout_long_")}
  train(objective, with_long_part, config, str(tmp_path / "parts"), stop_after=5, progress=False)
  resumed, _ = train(objective, with_long_part, config, str(tmp_path / "parts"), progress=False)
  for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  plain, _ = train(objective, with_long_part, dataclasses.replace(config, long_every=0), str(tmp_path / "plain"),
                   progress=False)
  assert any(not np.array_equal(np.asarray(a), np.asarray(b))
             for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(plain)))
  with pytest.raises(ValueError, match="different run.*train"):
    train(objective, with_long_part, config, str(tmp_path / "plain"), progress=False)
  with pytest.raises(ValueError, match="long_every asks for batches of the corpus's long part, but it has none"):
    train(objective, tiny_corpus, config, str(tmp_path / "none"), progress=False)
