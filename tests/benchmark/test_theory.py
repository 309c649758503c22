"""Leviathan et al. (2023) formulas against hand-computed values."""

import pytest

from specjax.benchmark import theory


def test_expected_tokens_per_round():
  assert theory.expected_tokens_per_round(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)  # 1.875
  assert theory.expected_tokens_per_round(0.0, 4) == 1.0
  assert theory.expected_tokens_per_round(1.0, 4) == 5.0
  assert theory.expected_tokens_per_round(0.8, 4) == pytest.approx((1 - 0.8 ** 5) / 0.2)  # 3.3616


def test_theorem_3_8_and_correction():
  # alpha 0.8, K 4, c 0.05: 3.3616 / 1.2 = 2.801333...
  assert theory.theorem_speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)
  # verification of 5 positions costing 1.3 single steps: 3.3616 / (0.2 + 1.3)
  assert theory.corrected_speedup(0.8, 4, 0.05, 1.3) == pytest.approx(3.3616 / 1.5)
  assert theory.corrected_speedup(0.8, 4, 0.05, 1.0) == pytest.approx(theory.theorem_speedup(0.8, 4, 0.05))


def test_cost_ratios_from_phase_times():
  c, r = theory.cost_ratios(draft_ms=8.0, verify_ms=24.0, accept_ms=1.0, ar_verify_ms=19.0, ar_accept_ms=1.0, k=4)
  assert c == pytest.approx(0.1) and r == pytest.approx(1.25)


def test_gap_is_explained_only_beyond_tolerance():
  assert theory.explain_gap(1.9, 2.0, 2.0, 2.0, 1.0, 1.0, 1) is None
  note = theory.explain_gap(1.0, 2.0, 1.5, 3.0, 1.5, 1.5, 1)
  assert "-50%" in note and "not i.i.d." in note
  note = theory.explain_gap(1.0, 2.0, 3.0, 3.0, 3.0, 1.5, 2)
  assert "phase model" in note and "slowest row" in note


def test_invalid_inputs():
  with pytest.raises(ValueError):
    theory.expected_tokens_per_round(1.5, 2)
  with pytest.raises(ValueError):
    theory.corrected_speedup(0.5, 2, 0.1, 0.0)


def test_a_chain_tree_expects_the_chain_formula():
  from specjax.trees.static import StaticTree
  for alpha, k in ((0.8, 4), (0.5, 3), (0.958, 6)):
    assert theory.tree_expected_tokens(StaticTree.chain(k), (alpha,)) == pytest.approx(
        theory.expected_tokens_per_round(alpha, k))
    assert theory.tree_expected_tokens(StaticTree.chain(k), theory.rank_acceptance(alpha, 0.5, 3)) == pytest.approx(
        theory.expected_tokens_per_round(alpha, k))


def test_a_small_tree_by_hand():
  from specjax.trees.static import StaticTree
  tree = StaticTree(((0,), (1,), (0, 0), (0, 1), (1, 0)))
  # Rank 0 at 0.6, rank 1 at 0.3: 1 + 0.6 + 0.3 + 0.36 + 0.18 + 0.18 = 2.62.
  assert theory.tree_expected_tokens(tree, (0.6, 0.3)) == pytest.approx(2.62)
  # alpha 0.8, sibling rate 0.5: rank 1 gets half of the 0.2 left, rank 2 half of the rest.
  assert theory.rank_acceptance(0.8, 0.5, 3) == pytest.approx((0.8, 0.1, 0.05))
  assert theory.rank_acceptance(0.8, 1.0, 3) == pytest.approx((0.8, 0.2, 0.0))
  with pytest.raises(ValueError, match="covers ranks 0..0"):
    theory.tree_expected_tokens(tree, (0.6,))
  with pytest.raises(ValueError, match="sum <= 1"):
    theory.tree_expected_tokens(tree, (0.8, 0.3))


def test_best_tree_takes_the_likeliest_paths_within_its_depth():
  from specjax.trees.static import StaticTree
  accept = (0.6, 0.3)
  # Depth 2, 4 nodes: (0,) 0.6, (0, 0) 0.36, (1,) 0.3, then (0, 1) 0.18 ties with (1, 0): the one first in order.
  tree = theory.best_tree(4, accept, max_depth=2)
  assert tree.paths == ((0,), (1,), (0, 0), (0, 1))
  assert theory.tree_expected_tokens(tree, accept) == pytest.approx(1 + 0.6 + 0.3 + 0.36 + 0.18)
  assert theory.best_tree(3, (0.9, 0.05), max_depth=3) == StaticTree.chain(3)  # 0.729 beats 0.045
  assert theory.best_tree(3, (0.9, 0.05), max_depth=2).paths == ((0,), (1,), (0, 0))
  with pytest.raises(ValueError, match="no tree of 3 nodes"):
    theory.best_tree(3, accept, max_depth=1)


def test_rates_per_depth():
  from specjax.trees.static import StaticTree
  tree = StaticTree(((0,), (1,), (0, 0), (0, 1), (1, 0)))
  table = ((0.6, 0.3), (0.5, 0.1))
  # depth 1 at the first row, depth 2 at the second: 1 + 0.6 + 0.3 + 0.6 * (0.5 + 0.1) + 0.3 * 0.5
  assert theory.tree_expected_tokens(tree, table) == pytest.approx(1 + 0.9 + 0.36 + 0.15)
  # a table of one row is the flat list; a tree deeper than the table reuses its last row
  assert theory.tree_expected_tokens(tree, [table[0]]) == pytest.approx(theory.tree_expected_tokens(tree, table[0]))
  assert theory.tree_expected_tokens(StaticTree.chain(3), table) == pytest.approx(1 + 0.6 + 0.3 + 0.15)
  for bad, message in (([(0.6, 0.3), 0.5], "mixes"), ([(0.6, 0.3), (0.5,)], "same ranks"),
                       ([(0.6, 0.3), (0.9, 0.3)], "sum <= 1"), ([], "empty")):
    with pytest.raises(ValueError, match=message):
      theory.tree_expected_tokens(tree, bad)


def _trees(n_nodes, width, max_depth):
  """Every prefix- and rank-closed tree of n_nodes, ranks below width, at most max_depth deep (by brute force)."""
  import itertools
  paths = [p for d in range(1, max_depth + 1) for p in itertools.product(range(width), repeat=d)]
  for chosen in itertools.combinations(paths, n_nodes):
    present = set(chosen)
    if all((len(p) == 1 or p[:-1] in present) and (p[-1] == 0 or p[:-1] + (p[-1] - 1,) in present)
           for p in chosen):
      yield chosen


@pytest.mark.parametrize("table", [((0.6, 0.3, 0.05),), ((0.8, 0.1, 0.05), (0.3, 0.25, 0.2), (0.5, 0.1, 0.0)),
                                   ((0.4, 0.35, 0.2), (0.9, 0.05, 0.01))])
@pytest.mark.parametrize("n_nodes", [3, 5, 6])
def test_best_tree_is_the_best_of_every_tree(table, n_nodes):
  """Against brute force over every tree of N nodes, 3 deep and 3 wide: no other tree expects more tokens."""
  from specjax.trees.static import StaticTree
  best = theory.best_tree(n_nodes, table, max_depth=3)
  assert best.n_nodes == n_nodes and best.max_depth <= 3
  expected = theory.tree_expected_tokens(best, table)
  top = max(theory.tree_expected_tokens(StaticTree(t), table) for t in _trees(n_nodes, 3, 3))
  assert expected == pytest.approx(top)


def test_measured_rates_fill_what_was_not_measured():
  import numpy as np
  np.testing.assert_allclose(theory.measured_rates([[0.6, None], [None, None], [0.9, 0.3]], [0.5, 0.2]),
                             [[0.6, 0.0], [0.6, 0.0], [0.75, 0.25]])  # an unreached depth: the row above; 1.2 -> 1
  np.testing.assert_allclose(theory.measured_rates([[None, None], [0.7, 0.1]], [0.5, 0.2]), [[0.5, 0.2], [0.7, 0.1]])
  with pytest.raises(ValueError, match="no tree round"):
    theory.measured_rates([[None, None]])
