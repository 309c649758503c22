"""The distillation losses on hand-made logits, and the feature head's argmax term entering its objective."""

import jax
import ml_collections
import numpy as np

from specjax.training.losses import argmax_cross_entropy, kl_divergence, top1_agreement
from specjax.training.recipes import make_objective

from .test_training import SETTINGS


def test_argmax_cross_entropy_is_minus_log_q_at_the_targets_argmax():
  rng = np.random.default_rng(0)
  target_BxTxV, draft_BxTxV = rng.normal(size=(2, 3, 7)), rng.normal(size=(2, 3, 7))
  log_q = draft_BxTxV - np.log(np.exp(draft_BxTxV).sum(-1, keepdims=True))
  expected = -np.take_along_axis(log_q, target_BxTxV.argmax(-1)[..., None], -1)[..., 0]
  np.testing.assert_allclose(np.asarray(argmax_cross_entropy(target_BxTxV, draft_BxTxV)), expected, rtol=1e-5)


def test_argmax_cross_entropy_falls_as_the_draft_peaks_on_the_targets_token_where_the_kl_need_not():
  """A draft that puts nearly all its mass on the target's argmax agrees at top-1 with a low argmax term, though
  the KL to a flat-ish target grows: the term rewards what greedy verification accepts."""
  target = np.log(np.array([[[0.4, 0.35, 0.25]]]))
  matched, peaked = target.copy(), np.log(np.array([[[0.98, 0.01, 0.01]]]))
  assert float(argmax_cross_entropy(target, peaked)[0, 0]) < float(argmax_cross_entropy(target, matched)[0, 0])
  assert float(kl_divergence(target, peaked)[0, 0]) > float(kl_divergence(target, matched)[0, 0])
  assert float(top1_agreement(target, peaked)[0, 0]) == 1.0


def test_top1_weight_adds_the_argmax_term_linearly(peaked_target, tiny_corpus):
  """loss(w) = loss(0) + w * (the step-weighted argmax term): equal differences for w = 0, 1, 2, and positive."""
  losses = []
  for weight in (0.0, 1.0, 2.0):
    settings = ml_collections.ConfigDict(dict(SETTINGS.feature_head, top1_weight=weight, feature_weight=0.0))
    objective = make_objective("feature_head", peaked_target, settings, tiny_corpus)
    batch = tiny_corpus.batch(tiny_corpus.heldout_rows[:2], objective.layer_ids)
    losses.append(float(jax.jit(objective.loss)(objective.trainable, objective.frozen, batch)[0]))
  assert losses[1] - losses[0] > 0
  np.testing.assert_allclose(losses[2] - losses[1], losses[1] - losses[0], rtol=1e-4)
