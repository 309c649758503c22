"""Passage prompts (specjax.training.passages): the benchmark's long-context style, never its text."""

import pytest

from specjax.training import holdout
from specjax.training.passages import INSTRUCTIONS, paragraphs, passage_prompts


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
