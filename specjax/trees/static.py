"""`StaticTree(paths)`: a fixed tree of drafts (Medusa / Sequoia style), each node named by its path of child ranks
from the root: (0,) and (1,) are the draft's first and second choices after the last committed token, (0, 0) its
first choice after (0,). Nodes are numbered level by level, so a parent always comes before its children."""

import dataclasses

from specjax.trees.dynamic import MAX_NODES
from specjax.trees.rejection import BRANCHINGS


@dataclasses.dataclass(frozen=True)
class StaticTree:
  """paths: prefix-closed (a node's parent is in the tree) and rank-closed (a node of rank r > 0 has its sibling of
  rank r - 1), so that every node's children are the draft's first choices, in order; branching: "top_k" (the
  ranked choices of q) or "sample" (drawn from q without replacement, in that order)."""

  paths: tuple[tuple[int, ...], ...]
  branching: str = "top_k"

  def __post_init__(self):
    if self.branching not in BRANCHINGS:
      raise ValueError(f"unknown branching {self.branching!r}; use one of {list(BRANCHINGS)}")
    try:
      paths = tuple(tuple(int(r) for r in path) for path in self.paths)
    except TypeError:
      raise TypeError(f"StaticTree paths must be sequences of child ranks, e.g. ((0,), (1,), (0, 0)); "
                      f"got {self.paths!r}") from None
    if not paths or any(not path for path in paths):
      raise ValueError("a StaticTree needs at least one node, and every path at least one rank")
    if any(r < 0 for path in paths for r in path):
      raise ValueError(f"child ranks must be >= 0; got {self.paths!r}")
    if len(paths) > MAX_NODES:
      raise ValueError(f"a StaticTree of {len(paths)} nodes exceeds the {MAX_NODES} nodes a round verifies at most")
    if len(set(paths)) != len(paths):
      raise ValueError(f"StaticTree paths repeat a node: {self.paths!r}")
    present = set(paths)
    for path in paths:
      if len(path) > 1 and path[:-1] not in present:
        raise ValueError(f"StaticTree paths are not prefix-closed: {path} is there, its parent {path[:-1]} is not")
      if path[-1] > 0 and path[:-1] + (path[-1] - 1,) not in present:
        raise ValueError(f"StaticTree paths skip a rank: {path} is there, its sibling "
                         f"{path[:-1] + (path[-1] - 1,)} is not")
    object.__setattr__(self, "paths", tuple(sorted(paths, key=lambda path: (len(path), path))))

  @classmethod
  def chain(cls, k: int, branching: str = "top_k") -> "StaticTree":
    """K drafts in a row, each the draft's first choice after the one before."""
    return cls(tuple((0,) * depth for depth in range(1, k + 1)), branching)

  @property
  def n_nodes(self) -> int:
    return len(self.paths)

  @property
  def max_depth(self) -> int:
    return len(self.paths[-1])

  @property
  def parents(self) -> tuple[int, ...]:
    """Each node's parent index, -1 for the root's children."""
    index = {path: i for i, path in enumerate(self.paths)}
    return tuple(index[path[:-1]] if len(path) > 1 else -1 for path in self.paths)

  @property
  def ranks(self) -> tuple[int, ...]:
    """Each node's rank among its siblings."""
    return tuple(path[-1] for path in self.paths)

  @property
  def width(self) -> int:
    """The most children a node has (its highest rank + 1)."""
    return 1 + max(self.ranks)

  @property
  def depths(self) -> tuple[int, ...]:
    return tuple(len(path) for path in self.paths)

  @property
  def slots(self) -> int:
    """Cache slots past the root a round writes (one per node)."""
    return self.n_nodes

  @classmethod
  def balanced(cls, n_nodes: int, width: int = 2, branching: str = "top_k") -> "StaticTree":
    """A standard tree of n_nodes, ranks below `width`: nodes in order of depth + sum of ranks (ties: shallower,
    then path order), the likeliest nodes when a rank-r child is accepted with probability x^(r + 1), any x."""
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, int) or n_nodes < 1:
      raise ValueError(f"a balanced tree needs n_nodes >= 1, got {n_nodes!r}")
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
      raise ValueError(f"a balanced tree needs width >= 1, got {width!r}")
    paths, frontier = [], [(0,)]
    while len(paths) < n_nodes:
      path = min(frontier, key=lambda p: (len(p) + sum(p), len(p), p))
      frontier.remove(path)
      paths.append(path)
      frontier.append(path + (0,))
      if path[-1] + 1 < width:
        frontier.append(path[:-1] + (path[-1] + 1,))
    return cls(tuple(paths), branching)
