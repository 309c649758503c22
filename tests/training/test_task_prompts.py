"""Task prompts (specjax.training.task_prompts): prose tasks from Wikipedia titles, code tasks from Python functions,
JSON and CSV tasks; mixed 2:1:1, seeded, never sharing an 8-word run with a benchmark prompt."""

import json
import os

import pytest

from specjax.benchmark import tasks
from specjax.training import holdout, task_prompts as tp

BENCH_CODE = tasks.load_category("code")[1]["prompt"]   # "Write a Python function `add(a, b)` that returns the sum ..."

MODULE = '''
def add(a, b):
    """Return the sum of a and b."""

def _private(x):
    """Return x."""

def vague(x):
    """Like add, but different."""

def apply_twice(f, x):
    """Apply f to x twice.

    More text.
    """

def star(*args):
    """Return the arguments."""

class Box:
    def copy(self, deep):
        """Copy the box."""
'''


@pytest.fixture
def roots(tmp_path):
  wiki = tmp_path / "wiki" / "data"
  wiki.mkdir(parents=True)
  articles = {
      "Lawn mower": "A lawn mower is a machine for cutting grass.",
      "Yogurt": "Yogurt is a food. Most yogurt is made from milk.",
      "Nigeria": "Nigeria is a country in West Africa.",
      "Odd title": "Something else opens this lead.",
      "Bad/title": "Bad/title is skipped."}
  (wiki / "summaries_en-us.json").write_text(json.dumps(
      {k: {"title": k, "extract": v} for k, v in articles.items()}))
  code = tmp_path / "code"
  (code / "tests").mkdir(parents=True)
  (code / "mod.py").write_text(MODULE)
  (code / "tests" / "test_mod.py").write_text(MODULE.replace("add", "skipped"))
  (code / "broken.py").write_text("def (:\n")
  return str(tmp_path / "wiki"), str(code)


def test_prose_subjects_are_named_as_the_lead_names_them(roots):
  prompts = tp.prose_prompts(roots[0])
  subjects = ["a lawn mower", "Nigeria", "yogurt"]   # articles in key order; the odd and bad titles are skipped
  assert prompts == [tp.PROSE_TEMPLATES[i].format(s) for i, s in enumerate(subjects)]


def test_code_tasks_come_from_imperative_docstrings(roots):
  assert tp.code_prompts(roots[1]) == [
      "Write a Python function `add(a, b)` that returns the sum of a and b. Reply with only the code.",
      "Write a Python function `apply_twice(f, x)` that applies f to x twice. Reply with only the code.",
      "Write a Python function `copy(deep)` that copies the box. Reply with only the code."]


def test_structured_tasks_cover_every_field_choice():
  prompts = tp.structured_prompts()
  assert len(prompts) == len(tp.RECORDS) * (20 + 15) * 3   # C(6, 3) + C(6, 4) choices, three forms each
  assert len(set(prompts)) == len(prompts)
  assert 'Return a JSON object describing an order with the keys "id", "customer" and "item". Reply with only the ' \
         'JSON.' in prompts
  assert all(p.endswith(("Reply with only the JSON.", "Reply with only the CSV.")) for p in prompts)


def test_mix_seed_and_holdout(roots, monkeypatch):
  tp._pools.cache_clear()
  prompts = tp.task_prompts(6, seed=0, wiki_root=roots[0], code_root=roots[1])
  assert tp.task_prompts(6, seed=0, wiki_root=roots[0], code_root=roots[1]) == prompts
  assert tp.task_prompts(6, seed=1, wiki_root=roots[0], code_root=roots[1]) != prompts
  kinds = ["code" if "Python function" in p else "structured" if "Reply with only the" in p else "prose"
           for p in prompts]
  assert kinds == ["prose", "prose", "code", "structured", "prose", "code"]
  # `add(a, b)` is the benchmark's own code prompt: the held-out check drops it
  assert BENCH_CODE.startswith("Write a Python function `add(a, b)` that returns the sum of a and b")
  pools = tp._pools(roots[0], roots[1])
  assert not any("`add(a, b)`" in p for p in pools["code"]) and len(pools["code"]) == 2
  held_out = holdout.benchmark_shingles()
  assert not any(holdout.overlaps(p, held_out) for kind in pools for p in pools[kind])
  # a kind that runs out gives its turns to the others
  everything = tp.task_prompts(sum(map(len, pools.values())), wiki_root=roots[0], code_root=roots[1])
  assert sorted(everything) == sorted(p for kind in pools for p in pools[kind])
  tp._pools.cache_clear()


def test_bad_counts_are_refused(roots):
  assert tp.task_prompts(0) == []
  with pytest.raises(ValueError, match="n must be >= 0"):
    tp.task_prompts(-1)
  with pytest.raises(ValueError, match=r"asked for 10000 prompts, the packaged text gives \d+ \(prose 3, code 2"):
    tp.task_prompts(10_000, wiki_root=roots[0], code_root=roots[1])
  tp._pools.cache_clear()
  with pytest.raises(FileNotFoundError):
    tp.prose_prompts(os.path.join(roots[0], "missing"))


def test_take_in_turns_keeps_shares_and_refuses_more_than_the_pools_hold():
  taken = tp.take_in_turns([["a1", "a2", "a3", "a4"], ["b1"]], [2, 1], 5, seed=0)
  assert sorted(taken) == ["a1", "a2", "a3", "a4", "b1"]
  assert [t[0] for t in taken[:3]] == ["a", "a", "b"]  # two turns of the first pool, then one of the second
  with pytest.raises(ValueError, match="asked for 6 items, the pools hold 5"):
    tp.take_in_turns([["a1", "a2", "a3", "a4"], ["b1"]], [2, 1], 6, seed=0)
