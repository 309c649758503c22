"""The generalization check (specjax.training.generalization): its novel prompts stay out of training and off the
benchmark, its trained ones are in training, and the report holds every set's agreement."""

import re

import numpy as np

from specjax.benchmark.tasks import byte_ids
from specjax.drafters.feature_head import FeatureHead
from specjax.training import generalization as gen
from specjax.training import holdout, prompt_pool, task_prompts
from specjax.training.acceptance import greedy_continuations, teacher_forced
from specjax.training.objectives import feature_head_objective


def test_novel_templates_and_subjects_are_not_trained_on():
  templates = gen.training_templates()
  assert len(templates) == len(prompt_pool.PROSE_TEMPLATES) + len(task_prompts.PROSE_TEMPLATES)
  assert not set(gen.NOVEL_TEMPLATES) & set(templates)
  assert not set(gen.NOVEL_SUBJECTS) & set(prompt_pool.PROSE_SUBJECTS)
  training = prompt_pool.training_prompts()
  sets = gen.prompt_sets()
  for name in ("training template, new subject", "new template, training subject", "both new"):
    assert len(sets[name]) == 10 and not set(sets[name]) & set(training), name
  patterns = [re.compile(re.escape(t).replace(r"\{\}", ".+")) for t in templates]
  for prompt in sets["new template, training subject"] + sets["both new"]:
    assert not any(p.fullmatch(prompt) for p in patterns), prompt
  assert all(any(p.fullmatch(prompt) for p in patterns) for prompt in sets["training template, new subject"])


def test_trained_prompts_and_subjects_are_in_the_first_400_pool_prompts():
  first = prompt_pool.training_prompts()[:400]
  sets = gen.prompt_sets()
  assert set(sets["trained prompts"]) <= set(first)
  assert all(any(subject in p for p in first) for subject in gen.TRAINED_SUBJECTS)


def test_no_novel_prompt_overlaps_the_benchmark():
  shingles = holdout.benchmark_shingles()
  for name, prompts in gen.prompt_sets().items():
    if name != "trained prompts":  # the pool's own; its first template opens as one benchmark prompt does
      assert not any(holdout.overlaps(p, shingles) for p in prompts), name


def test_agreement_reports_each_set_as_teacher_forcing_does(peaked_target):
  head = FeatureHead.create(peaked_target, seed=3)
  report = gen.agreement(peaked_target, head, n=2, max_new_tokens=8)
  assert list(report) == list(gen.prompt_sets(2)) + ["benchmark prose"]
  for row in report.values():
    assert row["prompts"] == 2 and len(row["top1"]) == 3
    assert all(0.0 <= t <= 1.0 for t in row["top1"]) and np.isfinite(row["kl_1"])
  objective = feature_head_objective(head, 3)
  prompts = [("prose", byte_ids(p, peaked_target.config.vocab_size, 0)) for p in gen.prompt_sets(2)["both new"]]
  direct = teacher_forced(objective, objective.trainable,
                          greedy_continuations(peaked_target, prompts, 8, objective.layer_ids))
  np.testing.assert_allclose(report["both new"]["top1"], [direct[f"top1_{s}"] for s in (1, 2, 3)])
  np.testing.assert_allclose(report["both new"]["kl_1"], direct["kl_1"], rtol=1e-6)
