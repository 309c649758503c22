"""The tree rounds' rank log (`specjax.trees.ranks`): which sibling rank each visited context accepted, the per-rank
acceptance it gives (`stats.acceptance_by_rank`) and the tree theory the benchmark builds on it."""

import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import drafters, stats
from specjax.benchmark import theory, tree_cells
from specjax.trees import DynamicTree, StaticTree
from specjax.trees.ranks import path_ranks
from test_rejection import TARGET_CONFIG

# root -> nodes 0, 1, 2; node 0 -> 3, 4; node 4 -> 5
PARENTS = [[-1, -1, -1, 0, 0, 4]]


@pytest.mark.parametrize("path,n_accepted,ranks,children", [
    ([0, 4, 5], 3, [0, 1, 0, -1], [3, 2, 1, 0]),   # down to the leaf: a bonus token after it
    ([1], 1, [1, -1, -1, -1], [3, 0, 0, 0]),       # the second choice, a leaf
    ([], 0, [-1, -1, -1, -1], [3, 0, 0, 0]),       # every child of the root rejected
    ([0], 1, [0, -1, -1, -1], [3, 2, 0, 0]),       # node 0 accepted, both of its children rejected
])
def test_path_ranks(path, n_accepted, ranks, children):
  path_BxN = jnp.asarray([path + [-1] * (6 - len(path))], jnp.int32)
  rank_BxD1, children_BxD1 = path_ranks(jnp.asarray(PARENTS, jnp.int32), path_BxN, jnp.asarray([n_accepted]), 3)
  assert rank_BxD1.tolist() == [ranks] and children_BxD1.tolist() == [children]


def test_acceptance_by_rank_counts_contexts_that_had_the_rank():
  ranks = np.asarray([[0, 1, -1], [1, -1, -1], [-1, -1, -1]])
  children = np.asarray([[3, 2, 1], [3, 0, 0], [1, 0, 0]])
  # rank 0: accepted once over the 5 contexts with a child; rank 1: twice over the 3 with two; rank 2: never over
  # the 2 with three; rank 3: no context had it
  assert stats.acceptance_by_rank(ranks, children, 4) == [0.2, 2 / 3, 0.0, None]
  # per depth: the root contexts (column 0) hold rank 0 once in 3 and rank 1 once in 2; depth 2's contexts (column
  # 1) rank 1 once in the one with two children; the last column is the leaves' (no children), not a depth
  assert stats.acceptance_by_depth_and_rank(ranks, children, 4) == [[1 / 3, 1 / 2, 0.0, None],
                                                                    [0.0, 1.0, None, None]]


@pytest.fixture(scope="module")
def target():
  return specjax.init_model(TARGET_CONFIG, seed=3)


@pytest.mark.parametrize("tree", [StaticTree(((0,), (1,), (0, 0), (0, 1), (0, 0, 0))), DynamicTree(6, 3, 2)])
def test_a_perfect_draft_is_accepted_at_rank_zero_and_the_log_matches_the_rounds(target, tree):
  greedy = specjax.SamplingParams(temperature=0.0)
  prompts = [[1, 2, 3, 4], [5, 2]]
  batch = specjax.host.prepare(target, prompts, max_new_tokens=12, sampling=greedy, drafter=drafters.DraftModel(target),
                               tree=tree, stop_at_eos=False)
  out = specjax.host.run_batch(target, batch)
  accepted = out.accepted_RxB
  active = accepted >= 0
  assert out.tree_rank_RxBxD1.shape == accepted.shape + (tree.max_depth + 1,)
  # one accepted rank per accepted node, only in active rows
  np.testing.assert_array_equal((out.tree_rank_RxBxD1 >= 0).sum(-1), np.where(active, accepted, 0))
  assert (out.tree_children_RxBxD1[~active] == 0).all() and (out.tree_children_RxBxD1[active, 0] > 0).all()
  result = specjax.generate(target, prompts, max_new_tokens=12, sampling=greedy, drafter=drafters.DraftModel(target),
                            tree=tree, stop_at_eos=False)
  assert result.stats.acceptance_by_rank[0] == 1.0 and not any(result.stats.acceptance_by_rank[1:])
  by_depth = result.stats.acceptance_by_depth_and_rank
  assert len(by_depth) == tree.max_depth and all(row[0] == 1.0 and not any(row[1:]) for row in by_depth)


def test_tree_theory_of_a_record():
  tree = StaticTree(((0,), (1,), (0, 0)))
  rec = {"acceptance_by_rank": [0.6, 0.2], "tokens_per_round": 1.9}
  tree_cells.tree_theory(rec, tree)
  assert rec["expected_tokens_per_round"] == pytest.approx(theory.tree_expected_tokens(tree, (0.6, 0.2)))
  assert "measured 1.90" in rec["theory_gap"]
  dynamic = {"acceptance_by_rank": [0.6, 0.2], "tokens_per_round": 1.9}
  tree_cells.tree_theory(dynamic, DynamicTree(3, 2, 2))
  assert dynamic["expected_tokens_per_round"] == pytest.approx(rec["expected_tokens_per_round"])  # best tree of 3
  per_depth = {"acceptance_by_rank": [0.6, 0.2], "acceptance_by_depth_and_rank": [[0.9, 0.05], [0.3, None]],
               "tokens_per_round": 1.9}
  tree_cells.tree_theory(per_depth, tree)
  assert per_depth["expected_tokens_per_round"] == pytest.approx(1 + 0.9 + 0.05 + 0.9 * 0.3)
  empty = {"acceptance_by_rank": None}
  tree_cells.tree_theory(empty, tree)
  assert "no tree rounds" in empty["theory_gap"]
