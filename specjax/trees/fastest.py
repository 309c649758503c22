"""Tree sizes chosen for the machine (Sequoia's hardware-aware optimizer): over tree sizes and depths, the static
tree with the most expected tokens per unit of round cost, chains among the candidates, so that where no tree pays
on a machine the answer is a chain.

  speedup(tree) = E_tree / cost(tree),   cost in autoregressive steps (verification, draft calls, overhead)
E_tree is `expected.tree_expected_tokens` under a measured or assumed per-rank acceptance; the cost is whatever
`round_cost` says: `MeasuredRoundCost` builds it from measured parts, the AOT report from compiled programs.
"""

import dataclasses
from typing import Callable

from specjax.trees.expected import best_tree, check_fits, rate_table, tree_expected_tokens
from specjax.trees.static import StaticTree


def draft_calls(tree: StaticTree) -> tuple[int, ...]:
  """Positions of each draft call of one round: 1 for the root's context, then each level's nodes with children."""
  parents = set(tree.parents)
  return (1,) + tuple(sum(1 for node, depth in enumerate(tree.depths) if depth == level and node in parents)
                      for level in range(1, tree.max_depth))


def interpolate(points, x: float, what: str = "x", hold_ends: bool = False) -> float:
  """Piecewise-linear in x through measured (x, y) points; outside them a ValueError (no guessed costs), or with
  hold_ends the nearest end's value."""
  points = sorted((float(a), float(b)) for a, b in dict(points).items())
  if points and hold_ends:
    x = min(max(x, points[0][0]), points[-1][0])
  if not points or not points[0][0] <= x <= points[-1][0]:
    raise ValueError(f"{what} = {x} lies outside the measured range "
                     f"{[points[0][0], points[-1][0]] if points else []}")
  for (a, ya), (b, yb) in zip(points, points[1:]):
    if x <= b:
      return ya + (yb - ya) * (x - a) / (b - a)
  return points[-1][1]


@dataclasses.dataclass(frozen=True)
class MeasuredRoundCost:
  """A round's cost in autoregressive steps from measured parts: the verification of the tree's N + 1 positions
  (`verify_by_positions`: positions -> verify / step), one draft call per `draft_calls` entry (`draft_step` for one
  row, times `draft_by_width`: rows -> that call / the one-row call; None: a call costs the same at any width), and a
  fixed `overhead` per round."""

  verify_by_positions: tuple
  draft_step: float
  draft_by_width: tuple | None = None
  overhead: float = 0.0

  def __post_init__(self):
    for name in ("verify_by_positions", "draft_by_width"):
      if getattr(self, name) is None and name == "draft_by_width":
        continue
      points = tuple(sorted((int(a), float(b)) for a, b in dict(getattr(self, name)).items()))
      if not points or any(a < 1 or b <= 0 for a, b in points):
        raise ValueError(f"{name} must map positive row counts to positive costs, got {getattr(self, name)!r}")
      object.__setattr__(self, name, points)
    if self.draft_step < 0 or self.overhead < 0:
      raise ValueError(f"draft_step and overhead must be >= 0, got {self.draft_step}, {self.overhead}")

  @property
  def max_nodes(self) -> int:
    """The largest tree whose verification was measured (N + 1 positions)."""
    return self.verify_by_positions[-1][0] - 1

  def __call__(self, tree: StaticTree) -> float:
    widen = (lambda w: 1.0) if self.draft_by_width is None else (
        lambda w: interpolate(self.draft_by_width, w, "draft rows"))
    draft = sum(self.draft_step * widen(w) for w in draft_calls(tree))
    verify = interpolate(self.verify_by_positions, tree.n_nodes + 1, "verified positions")
    return draft + verify + self.overhead


@dataclasses.dataclass(frozen=True)
class TreeChoice:
  """A candidate tree, its expected tokens per round, its round cost (steps) and their ratio, the speedup."""

  tree: StaticTree
  expected_tokens: float
  cost: float

  @property
  def speedup(self) -> float:
    return self.expected_tokens / self.cost

  @property
  def is_chain(self) -> bool:
    return max(self.tree.ranks) == 0


def candidate_trees(accept_by_rank, sizes, max_depth: int, branching: str = "top_k", chains: bool = True):
  """The likeliest tree (`best_tree`) of every size in `sizes` at every depth limit 1..max_depth that can hold it,
  and with `chains` every chain of 1..max_depth drafts; each tree once."""
  width = len(rate_table(accept_by_rank)[0])
  trees = {}
  for n in sizes:
    for depth in range(1, min(max_depth, n) + 1):
      try:
        check_fits(n, depth, width)
      except ValueError:
        continue
      tree = best_tree(n, accept_by_rank, depth, branching)
      trees.setdefault(tree.paths, tree)
  if chains:
    for k in range(1, max_depth + 1):
      trees.setdefault(StaticTree.chain(k).paths, StaticTree.chain(k, branching))
  if not trees:
    raise ValueError(f"no tree of sizes {list(sizes)} is at most {max_depth} deep with {width} ranks")
  return list(trees.values())


def ranked_choices(accept_by_rank, round_cost: Callable[[StaticTree], float], sizes, max_depth: int,
                   branching: str = "top_k", chains: bool = True) -> list[TreeChoice]:
  """Every candidate (`candidate_trees`) with its expected tokens and cost, fastest first; ties go to fewer nodes,
  then to shallower trees."""
  choices = [TreeChoice(t, tree_expected_tokens(t, accept_by_rank), float(round_cost(t)))
             for t in candidate_trees(accept_by_rank, sizes, max_depth, branching, chains)]
  if any(c.cost <= 0 for c in choices):
    raise ValueError("round_cost must be positive for every tree")
  return sorted(choices, key=lambda c: (-c.speedup, c.tree.n_nodes, c.tree.max_depth))


def fastest_tree(accept_by_rank, round_cost, max_nodes: int, max_depth: int, branching: str = "top_k") -> TreeChoice:
  """The fastest tree of at most max_nodes nodes and max_depth levels at this acceptance and cost, a chain where no
  branching pays."""
  if max_nodes < 1 or max_depth < 1:
    raise ValueError(f"max_nodes and max_depth must be >= 1, got {max_nodes}, {max_depth}")
  return ranked_choices(accept_by_rank, round_cost, range(1, max_nodes + 1), max_depth, branching)[0]
