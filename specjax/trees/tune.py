"""Static trees tuned to a drafter (Medusa's calibrated sparse tree, Sequoia's positional acceptance): measure the
drafter's acceptance per depth and sibling rank on calibration prompts, then take the static tree of N nodes with
the most expected tokens per round at those rates (`trees.expected.best_tree`)."""

from specjax.trees.expected import best_tree, measured_rates
from specjax.trees.static import StaticTree


def comb(depth: int, width: int, branching: str = "top_k") -> StaticTree:
  """The draft's first-choice chain, `depth` deep, with `width` ranked children at each of its contexts (the root
  included): depth * width nodes that measure every rank's acceptance at every depth in one round."""
  if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
    raise ValueError(f"a comb needs depth >= 1, got {depth!r}")
  if isinstance(width, bool) or not isinstance(width, int) or width < 1:
    raise ValueError(f"a comb needs width >= 1, got {width!r}")
  return StaticTree(tuple((0,) * d + (r,) for d in range(depth) for r in range(width)), branching)


def measure_acceptance(target, drafter, prompts, *, depth: int, width: int, max_new_tokens: int,
                       branching: str = "top_k", batch_size: int = 0, **generate_kwargs) -> list[list[float | None]]:
  """The drafter's acceptance per depth (rows, depth 1 first) and sibling rank (columns), measured by generating
  from `prompts` with `comb(depth, width)` trees (`specjax.generate`'s other arguments pass through). With
  batch_size, `batch_size` prompts a call, the calls' tables averaged entry by entry: a drafter's numerics may
  follow its row count (q4's kernel rounds 1-4 rows to int8, more rows run in float and draft the target's own
  tokens), so calibrate at the batch that decodes."""
  from specjax.generate import generate
  size = batch_size or len(prompts)
  tables = [generate(target, prompts[i:i + size], drafter=drafter, tree=comb(depth, width, branching),
                     max_new_tokens=max_new_tokens, **generate_kwargs).stats.acceptance_by_depth_and_rank
            for i in range(0, len(prompts), size)]
  return mean_tables(tables)


def mean_tables(tables) -> list[list[float | None]]:
  """Entry-by-entry mean of acceptance tables of one shape, over the tables that measured the entry (None where
  none did)."""
  def mean(values):
    measured = [v for v in values if v is not None]
    return sum(measured) / len(measured) if measured else None
  return [[mean(column) for column in zip(*rows)] for rows in zip(*tables)]


def tuned_tree(n_nodes: int, acceptance, max_depth: int, branching: str = "top_k") -> StaticTree:
  """The static tree of n_nodes, at most max_depth deep, with the most expected tokens per round at the measured
  `acceptance` (`measure_acceptance`'s table; unmeasured entries count as never accepted)."""
  return best_tree(n_nodes, measured_rates(acceptance), max_depth, branching)
