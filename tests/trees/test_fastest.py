import itertools

import pytest

from specjax.trees.expected import tree_expected_tokens
from specjax.trees.fastest import (MeasuredRoundCost, candidate_trees, draft_calls, fastest_tree, interpolate,
                                   ranked_choices)
from specjax.trees.static import StaticTree


def _all_trees(max_nodes: int, max_depth: int, width: int):
  """Every prefix-closed tree (ranks below `width`, a rank-r child only after its rank r - 1 sibling)."""
  paths = [p for d in range(1, max_depth + 1) for p in itertools.product(range(width), repeat=d)]
  for n in range(1, max_nodes + 1):
    for chosen in itertools.combinations(paths, n):
      kept = set(chosen)
      if all(p[:-1] in kept or len(p) == 1 for p in kept) and all(p[-1] == 0 or p[:-1] + (p[-1] - 1,) in kept
                                                                 for p in kept):
        yield StaticTree(tuple(sorted(chosen, key=lambda p: (len(p), p))))


def test_interpolate_between_points_and_refuses_outside():
  points = {2: 1.0, 4: 2.0, 8: 2.5}
  assert interpolate(points, 3) == pytest.approx(1.5)
  assert interpolate(points, 6) == pytest.approx(2.25)
  assert interpolate(points, 8) == pytest.approx(2.5)
  with pytest.raises(ValueError, match="outside the measured range"):
    interpolate(points, 9)
  with pytest.raises(ValueError, match="outside the measured range"):
    interpolate(points, 1)
  assert interpolate(points, 1, hold_ends=True) == 1.0 and interpolate(points, 20, hold_ends=True) == 2.5


def test_measured_round_cost_by_hand():
  cost = MeasuredRoundCost(verify_by_positions={1: 1.0, 5: 1.4, 9: 1.8}, draft_step=0.1,
                           draft_by_width={1: 1.0, 4: 1.6}, overhead=0.05)
  tree = StaticTree(((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)))
  assert draft_calls(tree) == (1, 2, 1)
  # verify 7 positions: 1.6; draft calls of 1, 2, 1 rows: 0.1 * (1 + 1.2 + 1); overhead 0.05.
  assert cost(tree) == pytest.approx(1.6 + 0.32 + 0.05)
  assert cost(StaticTree.chain(4)) == pytest.approx(1.4 + 0.4 + 0.05)
  assert cost.max_nodes == 8
  with pytest.raises(ValueError, match="verified positions"):
    cost(StaticTree.chain(9))


@pytest.mark.parametrize("kwargs, match", [
    (dict(verify_by_positions={}, draft_step=0.1), "verify_by_positions"),
    (dict(verify_by_positions={0: 1.0}, draft_step=0.1), "verify_by_positions"),
    (dict(verify_by_positions={1: 1.0}, draft_step=0.1, draft_by_width={1: -1.0}), "draft_by_width"),
    (dict(verify_by_positions={1: 1.0}, draft_step=-0.1), "draft_step"),
])
def test_measured_round_cost_refuses_bad_parts(kwargs, match):
  with pytest.raises(ValueError, match=match):
    MeasuredRoundCost(**kwargs)


def test_free_verification_takes_the_largest_tree():
  """Verification and drafting at no extra cost: every node adds expected tokens, so the answer is the most nodes."""
  accept = (0.5, 0.3, 0.1)
  best = fastest_tree(accept, lambda tree: 1.0, max_nodes=12, max_depth=4)
  assert best.tree.n_nodes == 12 and not best.is_chain
  assert best.speedup == pytest.approx(tree_expected_tokens(best.tree, accept))


def test_costly_verification_with_a_confident_draft_takes_a_chain():
  """The CPU case: each verified position costs a tenth of a step and the draft is right 95% of the time, so a
  sibling (accepted at most 5% of the time) never repays its position."""
  cost = MeasuredRoundCost(verify_by_positions={1: 1.0, 17: 2.6}, draft_step=0.3)
  best = fastest_tree((0.95, 0.03, 0.01), cost, max_nodes=16, max_depth=8)
  assert best.is_chain
  chains = [c for c in ranked_choices((0.95, 0.03, 0.01), cost, range(1, 17), 8) if c.is_chain]
  assert best == chains[0]


def test_cheap_verification_with_a_doubtful_draft_branches():
  cost = MeasuredRoundCost(verify_by_positions={1: 1.0, 17: 1.1}, draft_step=0.05)
  best = fastest_tree((0.4, 0.2, 0.1, 0.05), cost, max_nodes=16, max_depth=6)
  assert not best.is_chain and best.tree.width > 1


@pytest.mark.parametrize("accept", [(0.6, 0.25), (0.8, 0.1), (0.3, 0.3)])
def test_fastest_beats_every_small_tree(accept):
  """Against every tree of up to 5 nodes, 3 levels and 2 ranks, under a cost that grows with nodes and levels."""
  cost = MeasuredRoundCost(verify_by_positions={1: 1.0, 6: 1.5}, draft_step=0.2)
  best = fastest_tree(accept, cost, max_nodes=5, max_depth=3)
  for tree in _all_trees(5, 3, 2):
    assert best.speedup >= tree_expected_tokens(tree, accept) / cost(tree) - 1e-12, tree.paths


def test_candidates_are_distinct_and_bad_limits_are_refused():
  trees = candidate_trees((0.6, 0.3), range(1, 7), 3)
  assert len({t.paths for t in trees}) == len(trees)
  assert all(t.n_nodes <= 6 and t.max_depth <= 3 for t in trees)
  assert {StaticTree.chain(k).paths for k in (1, 2, 3)} <= {t.paths for t in trees}
  with pytest.raises(ValueError, match="max_nodes"):
    fastest_tree((0.6,), lambda t: 1.0, max_nodes=0, max_depth=3)
  with pytest.raises(ValueError, match="positive"):
    ranked_choices((0.6,), lambda t: 0.0, (2,), 2)
