"""`DynamicTree(nodes, depth, top_k)`: a tree grown per row and round from the draft's own confidence (EAGLE-2).

Each level expands the top_k nodes of highest value (cumulative draft log-probability along the path); each
expanded node proposes its top_k children; the N nodes of highest value over all proposals are verified. A node's
value never exceeds its parent's, and ties go to the earlier (shallower) proposal, so a kept node's parent is kept.
"""

import dataclasses

from specjax.trees.rejection import BRANCHINGS

MAX_NODES = 64


@dataclasses.dataclass(frozen=True)
class DynamicTree:
  """nodes: N, verified per round; depth: the deepest level grown; top_k: nodes expanded per level and children
  proposed per expanded node; branching: "top_k" (each context's top choices) or "sample" (drawn from q without
  replacement; values then follow the rank, never the drawn token, which keeps the recursive rule exact)."""

  nodes: int = 16
  depth: int = 5
  top_k: int = 4
  branching: str = "top_k"

  def __post_init__(self):
    for name in ("nodes", "depth", "top_k"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"DynamicTree.{name} must be an int >= 1, got {value!r}")
    if self.branching not in BRANCHINGS:
      raise ValueError(f"unknown branching {self.branching!r}; use one of {list(BRANCHINGS)}")
    if self.nodes > self.proposals:
      raise ValueError(f"DynamicTree(nodes={self.nodes}) exceeds the {self.proposals} proposals that depth "
                       f"{self.depth} with top_k {self.top_k} makes (top_k + (depth - 1) * top_k**2)")
    if self.nodes > MAX_NODES:
      raise ValueError(f"DynamicTree(nodes={self.nodes}) exceeds the {MAX_NODES} nodes a round verifies at most")

  @property
  def n_nodes(self) -> int:
    return self.nodes

  @property
  def max_depth(self) -> int:
    return min(self.depth, self.nodes)

  @property
  def width(self) -> int:
    """The most children a node can have: top_k."""
    return self.top_k

  @property
  def proposals(self) -> int:
    """Candidate nodes the growth proposes: top_k children of the root, then top_k of each expanded node."""
    return self.top_k + (self.depth - 1) * self.top_k**2

  @property
  def expanded(self) -> int:
    """Nodes the draft runs on (top_k per level above the deepest a kept node can be): the entries it writes past
    the root."""
    return (self.max_depth - 1) * self.top_k

  @property
  def slots(self) -> int:
    """Cache slots past the root a round writes: the draft's expansions, then the verified nodes."""
    return max(self.nodes, self.expanded)
