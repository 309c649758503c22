"""Quality scores on hand-written outputs."""

import pytest

from specjax.benchmark import quality, tasks


def test_suite_has_eight_prompts_per_category_with_test_fields():
  for category in tasks.CATEGORIES:
    prompts = tasks.load_category(category)
    assert len(prompts) >= 8 and len({p["id"] for p in prompts}) == len(prompts)
  assert all(p["tests"] and p["entry_point"] for p in tasks.load_category("code"))
  assert {p["format"] for p in tasks.load_category("structured")} == {"json", "csv"}
  lengths = [len(p["prompt"]) for p in tasks.load_category("long_context")]
  assert max(lengths) > 5 * min(lengths)  # context length varies


def test_select_takes_the_first_n_prompts_or_all_of_them_at_zero():
  prompts = tasks.load_category("prose")
  assert tasks.select("prose", 3) == list(prompts[:3])
  assert tasks.select("prose", 0) == list(prompts)
  with pytest.raises(ValueError, match="has only"):
    tasks.select("prose", len(prompts) + 1)
  with pytest.raises(ValueError, match=">= 0"):
    tasks.select("prose", -1)


def test_code_passes_only_with_correct_function():
  spec = tasks.load_category("code")[1]  # add(a, b)
  assert quality.score("code", "```python\ndef add(a, b):\n    return a + b\n```", spec) == {
      "parses": 1.0, "passes_tests": 1.0}
  assert quality.score("code", "def add(a, b):\n    return a - b", spec)["passes_tests"] == 0.0
  assert quality.score("code", "def add(a, b) return", spec) == {"parses": 0.0, "passes_tests": 0.0}


def test_structured_parses():
  assert quality.score("structured", '```json\n{"a": 1}\n```', {"format": "json"})["parses"] == 1.0
  assert quality.score("structured", 'Here: {"a": [1, 2]}', {"format": "json"})["parses"] == 1.0
  assert quality.score("structured", '{"a": ', {"format": "json"})["parses"] == 0.0
  assert quality.score("structured", "name,price\napple,1\npear,2", {"format": "csv"})["parses"] == 1.0
  assert quality.score("structured", "just words", {"format": "csv"})["parses"] == 0.0


def test_prose_and_long_context():
  assert quality.score("prose", "a b a b a b", {})["distinct_2"] == pytest.approx(2 / 5)
  spec = {"passage": "The cat sat on the mat today.", "expected": "sat on the mat"}
  scores = quality.score("long_context", "the cat sat on the mat", spec)
  assert scores == {"grounded": 1.0, "quotes_expected": 1.0}


def test_aggregate_and_agreement():
  a = quality.aggregate("structured", [{"parses": 1.0}, {"parses": 0.0}, {"parses": 1.0}, {"parses": 1.0}])
  assert a["value"] == 0.75 and a["n"] == 4 and a["ci95"][0] < 0.75 < a["ci95"][1]
  b = quality.aggregate("structured", [{"parses": 1.0}] * 4)
  assert quality.agree(a, b)
  zero = quality.aggregate("structured", [{"parses": 0.0}] * 4)
  assert not quality.agree(zero, b)
