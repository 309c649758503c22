"""One training run from an ml_collections config (what scripts/train_draft.py calls): load the target, build or
reuse the corpus, then for each drafter kind measure held-out acceptance, train, measure again, export, and write
`metrics.json` (per kind in output_dir/<kind>/, and a summary in output_dir/)."""

import dataclasses
import json
import os
import time

from specjax.cli import model_from_source
from specjax.compilation_cache import enable_compilation_cache
from specjax.drafters import registry
from specjax.memory import GiB, peak_resident_bytes
from specjax.model import Model
from specjax.training.acceptance import greedy_continuations, heldout_prompts, teacher_forced, tokens_per_round
from specjax.training.corpus import CorpusConfig, described
from specjax.training.curves import write_curves
from specjax.training.data import Corpus, build_corpus
from specjax.training.recipes import layers_needed, make_objective
from specjax.training.export import save_drafter
from specjax.training.files import write_json
from specjax.training.trainer import TrainConfig, train

def _fields(cls, values) -> dict:
  names = {f.name for f in dataclasses.fields(cls)}
  unknown = set(values) - names
  if unknown:
    raise ValueError(f"unknown {cls.__name__} fields {sorted(unknown)}")
  return dict(values)


def _acceptance(target, drafter, prompts, config) -> dict:
  return tokens_per_round(target, drafter, prompts, k=config.eval.k, max_new_tokens=config.eval.max_new_tokens)


def train_kind(kind: str, target: Model, corpus: Corpus, prompts, continuations, config) -> dict:
  """Trains one kind under output_dir/<kind>/ and returns its metrics.json content (continuations: the target's
  greedy continuations of `prompts` with its features, from `greedy_continuations`)."""
  out = os.path.join(config.output_dir, kind)
  os.makedirs(out, exist_ok=True)
  settings = config[kind]
  objective = make_objective(kind, target, settings, corpus, config.seed)
  overrides = settings.to_dict().get("train", {})
  train_config = TrainConfig(**_fields(TrainConfig, dict(config.train.to_dict(), **overrides)))
  before_path = os.path.join(out, "acceptance_before.json")  # survives an interruption: not measured twice
  timings, began = {}, time.perf_counter()
  if os.path.exists(before_path):
    with open(before_path, encoding="utf-8") as f:
      before = json.load(f)
  else:
    before = _acceptance(target, objective.drafter(objective.trainable), prompts, config)
    write_json(before_path, before)
  timings["acceptance_before_s"] = time.perf_counter() - began
  began = time.perf_counter()
  run = {"settings": settings.to_dict(), "corpus": described(config.corpus.to_dict()), "model": config.model}
  trained, heldout = train(objective, corpus, train_config, out, run=json.loads(json.dumps(run, default=list)))
  train_s = time.perf_counter() - began
  drafter = objective.drafter(trained)
  began = time.perf_counter()
  after = _acceptance(target, drafter, prompts, config)
  timings["acceptance_after_s"] = time.perf_counter() - began
  on_prompts = teacher_forced(objective, trained, continuations)
  export_dir = os.path.join(out, "drafter")
  save_drafter(drafter, export_dir, dtype=config.get("export_dtype", ""))
  metrics = {"kind": kind, "drafter": repr(drafter), "k": config.eval.k,
             "acceptance_before": before["all"], "acceptance_after": after["all"],
             "acceptance_before_by_category": before, "acceptance_after_by_category": after,
             "train_steps": train_config.steps, "train_time_s": train_s, "drafter_dir": export_dir,
             "corpus_sequences": int(len(corpus.tokens)), "corpus_tokens": int(corpus.mask.sum()),
             "corpus_long_sequences": int(len(corpus.long.tokens)) if corpus.long is not None else 0,
             "corpus_long_tokens": int(corpus.long.mask.sum()) if corpus.long is not None else 0, "timings": timings,
             "teacher_forced_on_eval_prompts": on_prompts, **heldout}
  write_json(os.path.join(out, "metrics.json"), metrics)
  write_curves(os.path.join(out, "metrics.jsonl"), os.path.join(out, "curves.png"),
               acceptance=(before["all"], after["all"], config.eval.k))
  return metrics


def run(config) -> dict:
  """Every kind in config.drafters; returns (and writes to output_dir/metrics.json) {kind: metrics}."""
  if config.compilation_cache_dir:
    enable_compilation_cache(os.path.expanduser(config.compilation_cache_dir))
  began = time.perf_counter()
  kinds = tuple(config.drafters)
  unknown = [kind for kind in kinds if kind not in registry.trainable()]
  if unknown or not kinds:
    raise ValueError(f"config.drafters must name trainable kinds {list(registry.trainable())}, got {list(kinds)}")
  target = model_from_source(config.model, config.dtype)
  layer_ids = sorted({i for kind in kinds for i in layers_needed(kind, target, config[kind])})
  corpus_config = CorpusConfig(**_fields(CorpusConfig, config.corpus.to_dict()))
  cache_dir = os.path.expanduser(config.corpus_cache_dir) if config.corpus_cache_dir else ""
  corpus = build_corpus(target, corpus_config, layer_ids, cache_dir)
  corpus_s = time.perf_counter() - began
  prompts = heldout_prompts(target, config.eval.categories, config.eval.prompts_per_category,
                            config.eval.get("max_prompt_tokens", 0))
  continuations = greedy_continuations(target, prompts, config.eval.max_new_tokens, layer_ids)
  results = {kind: train_kind(kind, target, corpus, prompts, continuations, config) for kind in kinds}
  summary = {"model": config.model, "k": config.eval.k, "total_time_s": time.perf_counter() - began,
             "corpus_s": corpus_s, "peak_resident_gib": peak_resident_bytes() / GiB, "drafters": results}
  if len(kinds) == 1:
    summary.update({k: results[kinds[0]][k] for k in ("acceptance_before", "acceptance_after")})
  os.makedirs(config.output_dir, exist_ok=True)
  write_json(os.path.join(config.output_dir, "metrics.json"), summary)
  return summary
