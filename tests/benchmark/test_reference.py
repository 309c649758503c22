"""The reference chain a benchmark pairs every drafter cell with (config.paired_reference)."""

import pytest

from specjax.benchmark.plan import Cell
from specjax.benchmark.reference import is_reference, parse_reference, reference_section

METHODS = ("ar", "feature_head", "quantized:q4")


def test_parse_reference_splits_at_the_last_at_sign():
  assert parse_reference("", METHODS, (3, 4)) is None
  assert parse_reference("quantized:q4@4", METHODS, (3, 4)) == ("quantized:q4", 4)


@pytest.mark.parametrize("value, message", [("quantized:q4", "'METHOD@K'"), ("quantized:q4@x", "'METHOD@K'"),
                                            ("ar@4", "not a drafter method"), ("medusa@4", "not a drafter method"),
                                            ("feature_head@6", "not in config.ks")])
def test_parse_reference_names_what_is_wrong(value, message):
  with pytest.raises(ValueError, match=message):
    parse_reference(value, METHODS, (3, 4))


def test_only_the_chain_cell_itself_is_the_reference():
  reference = ("quantized:q4", 4)
  assert is_reference(Cell("quantized:q4", 4, 1, 0.0), reference)
  assert not is_reference(Cell("quantized:q4", 3, 1, 0.0), reference)
  assert not is_reference(Cell("quantized:q4", 4, 1, 0.0, tree=object()), reference)
  assert not is_reference(Cell("quantized:q4", 4, 1, 0.0), None)


def test_the_section_lists_each_paired_cell_with_its_placements():
  ours = [{"method": "ar", "category": "code", "batch_size": 1, "k": 0},
          {"method": "feature_head", "category": "code", "batch_size": 1, "k": "tree:8",
           "paired_reference": ["quantized:q4", 4], "paired_speedup_vs_ar": 1.7,
           "paired_vs_reference": {"speedup": 1.12, "pairs": 6, "by_placement": {"near": {"speedup": 1.15}}}}]
  text = "\n".join(reference_section(ours))
  assert "## Paired against quantized:q4 K=4" in text
  assert "| feature_head | code | 1 | tree:8 | 6 | 1.12 | 1.15 | - | 1.70 |" in text
  assert reference_section(ours[:1]) == []
