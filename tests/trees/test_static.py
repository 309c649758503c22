"""StaticTree: node order, parents, ranks and depths; the chain; clear errors for trees that are not trees."""

import pytest

from specjax.trees.static import StaticTree


def test_nodes_come_level_by_level_with_their_parents_first():
  tree = StaticTree(((0, 0), (1,), (0,), (0, 1), (1, 0), (0, 0, 0)))
  assert tree.paths == ((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0))
  assert tree.parents == (-1, -1, 0, 0, 1, 2)
  assert tree.ranks == (0, 1, 0, 1, 0, 0)
  assert tree.depths == (1, 1, 2, 2, 2, 3)
  assert (tree.n_nodes, tree.max_depth) == (6, 3)
  assert all(parent < node for node, parent in enumerate(tree.parents))


def test_a_chain_is_a_tree_of_one_child_per_node():
  tree = StaticTree.chain(4, "sample")
  assert tree.parents == (-1, 0, 1, 2) and tree.ranks == (0, 0, 0, 0) and tree.branching == "sample"
  assert hash(tree) == hash(StaticTree(((0,), (0, 0), (0, 0, 0), (0, 0, 0, 0)), "sample"))


@pytest.mark.parametrize("paths,match", [
    (((0,), (0, 1)), "skip a rank"),
    (((0,), (1, 0)), "not prefix-closed"),
    (((1,),), "skip a rank"),
    (((0,), (0,)), "repeat a node"),
    ((), "at least one node"),
    (((0,), ()), "at least one node"),
    (((0,), (-1,)), ">= 0"),
])
def test_trees_that_are_not_trees_are_named(paths, match):
  with pytest.raises(ValueError, match=match):
    StaticTree(paths)


def test_bad_branching_and_paths_are_named():
  with pytest.raises(ValueError, match="unknown branching"):
    StaticTree(((0,),), "beam")
  with pytest.raises(TypeError, match="sequences of child ranks"):
    StaticTree((0, 1))


def test_balanced_trees_take_nodes_by_depth_plus_rank():
  assert StaticTree.balanced(4).paths == ((0,), (1,), (0, 0), (0, 1))
  assert StaticTree.balanced(6).paths == ((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0))
  assert StaticTree.balanced(3, width=1) == StaticTree.chain(3)
  assert StaticTree.balanced(5, width=4, branching="sample").paths == ((0,), (1,), (2,), (0, 0), (0, 1))
  for n in (4, 8, 16, 32):  # every node budget the AOT report compiles is a valid tree of that many nodes
    tree = StaticTree.balanced(n)
    assert tree.n_nodes == n and max(tree.ranks) <= 1 and tree.depths.count(1) == 2
  with pytest.raises(ValueError, match="n_nodes >= 1"):
    StaticTree.balanced(0)
  with pytest.raises(ValueError, match="width >= 1"):
    StaticTree.balanced(4, width=0)
