"""Everyday prose prompts (specjax.training.everyday): every kind taken in turn, seeded, none of them the
benchmark's or the generalization check's, never sharing an 8-word run with a benchmark prompt."""

import pytest

from specjax.training import everyday, generalization, holdout


def _kind(prompt: str) -> int:
  return next(i for i, family in enumerate(everyday._families()) if prompt in family)


def test_prompts_take_every_kind_in_turn_and_are_seeded():
  n = len(everyday._families())
  prompts = everyday.everyday_prompts(3 * n, seed=0)
  assert len(set(prompts)) == 3 * n
  assert [_kind(p) for p in prompts] == list(range(n)) * 3
  assert prompts == everyday.everyday_prompts(3 * n, seed=0)
  assert prompts != everyday.everyday_prompts(3 * n, seed=1)
  assert everyday.everyday_prompts(n, seed=0) == prompts[:n]


def test_a_kind_that_runs_out_leaves_its_turns_to_the_others():
  families = everyday._families()
  smallest = min(map(len, families))
  prompts = everyday.everyday_prompts(len(families) * (smallest + 5), seed=0)
  kinds = [_kind(p) for p in prompts]
  assert len(set(prompts)) == len(prompts)
  assert kinds.count(min(range(len(families)), key=lambda i: len(families[i]))) == smallest
  assert everyday.everyday_prompts(0) == []


def test_counts_beyond_the_lists_and_negative_counts_are_refused():
  available = sum(map(len, everyday._families()))
  with pytest.raises(ValueError, match=f"asked for {available + 1} prompts, the lists give {available}"):
    everyday.everyday_prompts(available + 1)
  with pytest.raises(ValueError, match="n must be >= 0"):
    everyday.everyday_prompts(-1)


def test_prompts_stay_off_the_benchmark_and_the_generalization_check():
  shingles = holdout.benchmark_shingles()
  prompts = [p for family in everyday._families() for p in family]
  assert len(prompts) > 10_000
  assert not any(holdout.overlaps(p, shingles) for p in prompts)
  assert not any(s in p for p in prompts for s in generalization.NOVEL_SUBJECTS)
  assert not any(p.startswith(t.split("{}")[0]) and p.endswith(t.split("{}")[1]) for p in prompts
                 for t in generalization.NOVEL_TEMPLATES)
