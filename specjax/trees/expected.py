"""Expected tokens per round of a static token tree from the acceptance of each sibling rank, per depth or the same
at every depth (Sequoia's positional acceptance, EAGLE-2), and the tree of N nodes that expects the most: the theory
the benchmark sets beside measurement and `tune` builds trees from."""

import numpy as np

from specjax.trees.static import StaticTree


def _check_ranks(accept_by_rank) -> tuple[float, ...]:
  accept_by_rank = tuple(float(a) for a in accept_by_rank)
  if not accept_by_rank or any(a < 0 for a in accept_by_rank) or sum(accept_by_rank) > 1.0 + 1e-9:
    raise ValueError(f"accept_by_rank must be probabilities of disjoint events (>= 0, sum <= 1), got "
                     f"{list(accept_by_rank)}")
  return accept_by_rank


def rate_table(accept_by_rank) -> tuple[tuple[float, ...], ...]:
  """Per-rank acceptance as one row per depth: a flat list holds at every depth; a table's row d - 1 holds at depth
  d, its last row below it."""
  rows = tuple(accept_by_rank)
  if not rows:
    raise ValueError("accept_by_rank is empty")
  is_row = [isinstance(r, (list, tuple, np.ndarray)) for r in rows]
  if any(is_row) and not all(is_row):
    raise ValueError(f"accept_by_rank mixes rates and rows of rates: {accept_by_rank!r}")
  rows = tuple(_check_ranks(r) for r in rows) if all(is_row) else (_check_ranks(rows),)
  if len({len(r) for r in rows}) != 1:
    raise ValueError(f"every depth's row of accept_by_rank must cover the same ranks, got {[len(r) for r in rows]}")
  return rows


def _rate(table, depth: int, rank: int) -> float:
  return table[min(depth, len(table)) - 1][rank]


def measured_rates(by_depth_and_rank, by_rank=None) -> list[list[float]]:
  """A rate table from measured acceptance (`stats.acceptance_by_depth_and_rank`): unmeasured ranks count 0, a depth
  no round reached takes the row above it (the pooled `by_rank` for the first), and a row whose ranks were measured
  over different contexts and sum past 1 is scaled to 1."""
  rows, above = [], by_rank
  for row in by_depth_and_rank:
    if row and row[0] is not None:
      above = row
    if above is None:
      raise ValueError("no measured acceptance: no tree round reached the first depth")
    rates = [p or 0.0 for p in above]
    rows.append([p / max(1.0, sum(rates)) for p in rates])
  if not rows:
    raise ValueError("no measured acceptance: the table has no depths")
  return rows


def tree_expected_tokens(tree, accept_by_rank) -> float:
  """Expected tokens per round of a static tree (Sequoia / EAGLE-2): 1 (the correction or bonus) + the sum over
  nodes of the probability that the node's path is accepted, the product of the acceptance of its ranks at their
  depths (accept_by_rank: one row of per-rank rates for every depth, or a row per depth, `rate_table`)."""
  table = rate_table(accept_by_rank)
  if max(tree.ranks) >= len(table[0]):
    raise ValueError(f"the tree has rank {max(tree.ranks)} children; accept_by_rank covers ranks "
                     f"0..{len(table[0]) - 1}")
  reach = []
  for parent, rank, depth in zip(tree.parents, tree.ranks, tree.depths):
    reach.append((1.0 if parent < 0 else reach[parent]) * _rate(table, depth, rank))
  return 1.0 + sum(reach)


def check_fits(n_nodes: int, max_depth: int, width: int) -> None:
  """Raises unless some tree of n_nodes is at most max_depth deep with ranks below width."""
  if n_nodes < 1 or max_depth < 1 or sum(width ** d for d in range(1, max_depth + 1)) < n_nodes:
    raise ValueError(f"no tree of {n_nodes} nodes is at most {max_depth} deep with {width} ranks")


def best_tree(n_nodes: int, accept_by_rank, max_depth: int, branching: str = "top_k"):
  """The static tree of n_nodes, at most max_depth deep, with the most expected tokens per round (Sequoia; Medusa's
  calibrated tree): the n_nodes likeliest paths, grown from the root, each after its parent and its lower-ranked
  sibling (so the set is a tree). accept_by_rank: as `tree_expected_tokens` takes it."""
  table = rate_table(accept_by_rank)
  width = len(table[0])
  check_fits(n_nodes, max_depth, width)
  chosen, frontier = [], {(0,): (_rate(table, 1, 0), 1.0)}  # path: (its probability, its parent's)
  while len(chosen) < n_nodes:
    path = min(frontier, key=lambda p: (-frontier[p][0], len(p), p))
    reach, parent_reach = frontier.pop(path)
    chosen.append(path)
    if len(path) < max_depth:
      frontier[path + (0,)] = (reach * _rate(table, len(path) + 1, 0), reach)
    if path[-1] + 1 < width:
      frontier[path[:-1] + (path[-1] + 1,)] = (parent_reach * _rate(table, len(path), path[-1] + 1), parent_reach)
  return StaticTree(tuple(chosen), branching)
