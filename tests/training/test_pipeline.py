"""scripts/train_draft.py's pipeline on a tiny random target: metrics.json with acceptance before and after, the
exported drafter loads through the CLI, and a rerun resumes (nothing retrained, nothing measured twice)."""

import json
import os

import ml_collections

from specjax.cli import drafter_from_config, model_from_source
from specjax.training.pipeline import run

from configs import train_draft_smoke  # noqa: E402


def tiny_config(output_dir: str) -> ml_collections.ConfigDict:
  c = train_draft_smoke.get_config()
  c.model = "random:tiny"
  c.drafters = ("medusa",)
  c.output_dir = output_dir
  c.corpus_cache_dir = os.path.join(output_dir, "corpus")
  c.compilation_cache_dir = ""
  c.corpus = dict(n_prompts=2, max_new_tokens=8, generate_batch=2, temperature=0.0, stdlib_sequences=4, seq_len=32,
                  heldout_fraction=0.25, seed=0)
  c.eval = dict(categories=("prose",), prompts_per_category=2, max_new_tokens=6, k=3, max_prompt_tokens=24)
  c.medusa.draft_vocab_size = 64
  return c


def test_metrics_export_and_resume(tmp_path):
  config = tiny_config(str(tmp_path))
  summary = run(config)
  with open(tmp_path / "metrics.json") as f:
    written = json.load(f)
  assert written["acceptance_before"] == summary["drafters"]["medusa"]["acceptance_before"] >= 1.0
  assert written["acceptance_after"] >= 1.0 and written["drafters"]["medusa"]["train_steps"] == 3
  assert 0 < written["peak_resident_gib"] < 24
  assert sorted(os.listdir(tmp_path / "medusa" / "checkpoints")) == ["2", "3"]
  assert (tmp_path / "medusa" / "curves.png").stat().st_size > 0
  target = model_from_source("random:tiny")
  drafter = drafter_from_config("medusa", target, written["drafters"]["medusa"]["drafter_dir"])
  assert drafter.config.draft_vocab_size == 64
  coverage = written["drafters"]["medusa"]["acceptance_after_by_category"]["draft_vocab_coverage"]
  assert 0.0 <= coverage <= 1.0
  on_prompts = written["drafters"]["medusa"]["teacher_forced_on_eval_prompts"]
  assert on_prompts["kl"] >= 0.0 and 0.0 <= on_prompts["top1_1"] <= 1.0
  again = run(config)  # resumes at the last step: no training, the same numbers
  assert again["drafters"]["medusa"]["acceptance_after"] == summary["drafters"]["medusa"]["acceptance_after"]
  assert again["drafters"]["medusa"]["timings"]["acceptance_before_s"] < 1.0


def test_draft_vocab_coverage():
  target = model_from_source("random:tiny")
  from specjax.drafters.medusa import MedusaConfig, MedusaHeads
  from specjax.training.acceptance import draft_vocab_coverage
  config = MedusaConfig.for_target(target.config, n_heads=2, draft_vocab_size=4)
  heads = MedusaHeads.create(target, config, vocab_ids=[1, 5, 7, 9])
  assert draft_vocab_coverage(heads, [[1, 2, 5], [9, 0]]) == 0.6
  assert draft_vocab_coverage(heads, [[], []]) is None
  whole = MedusaHeads.create(target, MedusaConfig.for_target(target.config, n_heads=2))
  assert draft_vocab_coverage(whole, [[1, 2]]) is None and draft_vocab_coverage(None, [[1]]) is None
