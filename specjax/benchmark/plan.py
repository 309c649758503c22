"""What a benchmark config asks for, checked before any model work (`validate_config`), and the cells it runs
(`plan`). The methods are "ar" (the autoregressive baseline) and the drafters of `specjax.drafters.registry`.

Every setting comes from the config file: `configs/bench_cpu.py` holds every key with its meaning and default,
and the other `configs/bench_*.py` start from it. `validate_config` invents no defaults: a missing key is an error.
"""

import dataclasses
import itertools
import os

import numpy as np

from specjax.benchmark import tasks
from specjax.benchmark.reference import parse_reference
from specjax.drafters import registry
from specjax.policy import SpeculationPolicy
from specjax.quantize import check_weights
from specjax.sampling import SamplingParams
from specjax.trees.expected import check_fits

AR = "ar"
AUTO = "auto"
PEERS = ("", "hf", "llama_cpp")
SWEEPS = ("grid", "axes", "smoke")
MAX_K = 64
TREE_KINDS = ("dynamic", "static", "tuned", "fastest")
# Every key of configs/bench_cpu.py (tests/benchmark/test_plan.py keeps the two the same).
SETTINGS = ("model", "dtype", "weights", "random_model", "methods", "drafter_dirs", "categories", "ks", "auto_ks",
            "batch_sizes", "temperatures", "sweep", "phase_split_batch_sizes", "phase_split_methods",
            "paired_verify_calls", "tree_nodes", "tree_kind", "tree_depth", "tree_top_k", "tree_branching",
            "tree_methods", "tree_calibration_prompts", "tree_per_category", "prompts_per_category", "max_new_tokens",
            "max_prompt_tokens", "prompt_bucket",
            "repeats", "paired_with_ar", "paired_reference", "draft_layers", "layer_skip_layers",
            "prompt_lookup_max_ngram", "chat",
            "stop_at_eos", "execute_code", "peers", "llama_cpp_dir", "seed", "output_dir", "compilation_cache_dir")


def methods() -> tuple[str, ...]:
  """Every method a config may name: the baseline, then the registered drafters."""
  return (AR,) + registry.names()


@dataclasses.dataclass(frozen=True)
class Cell:
  method: str
  k: int | str          # drafts per round, "auto" (the adaptive SpeculationPolicy over config.auto_ks) or
                        # "tree:N" (a token tree of N nodes, `tree`)
  batch_size: int
  temperature: float
  tree: object = None   # the cell's StaticTree or DynamicTree (a TunedTree until the runner tunes it)

  @property
  def auto(self) -> bool:
    return self.k == AUTO

  @property
  def sampling(self) -> SamplingParams:
    return SamplingParams(temperature=self.temperature)


@dataclasses.dataclass(frozen=True)
class TunedTree:
  """A tree cell's static tree still to be tuned (config.tree_kind "tuned"): N nodes, at most `depth` deep, ranks
  below `width`; the runner measures the method's acceptance and puts `specjax.trees.tune.tuned_tree` in its
  place. With `fastest` (tree_kind "fastest") it also measures the round's costs here and puts the fastest tree of
  at most N nodes in its place (`specjax.trees.fastest`; a chain where no branching pays)."""
  n_nodes: int
  depth: int
  width: int
  branching: str
  fastest: bool = False

  def __post_init__(self):
    check_fits(self.n_nodes, self.depth, self.width)   # the tuned tree will be best_tree's, which checks the same

  @property
  def slots(self) -> int:
    return self.n_nodes

  @property
  def max_depth(self) -> int:
    return self.depth


def _ints(name, values, low):
  values = tuple(values)
  if not values or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low for v in values):
    raise ValueError(f"config.{name} must be a non-empty list of ints >= {low}, got {list(values)}")
  return tuple(int(v) for v in values)


def split_method(method: str) -> tuple[str, str | None]:
  """(registered name, its source or None): a config's method is a name, or NAME:SOURCE for one variant of it
  (e.g. "quantized:int8" beside "quantized:q4"), the source in place of config.drafter_dirs.NAME."""
  name, colon, source = method.partition(":")
  return name, (source if colon else None)


def _methods(c: dict) -> tuple[str, ...]:
  known = methods()
  unknown = [m for m in c["methods"] if split_method(m)[0] not in known or split_method(m)[1] == ""]
  if unknown:
    raise ValueError(f"unknown method(s) {unknown}; known: {list(known)}, each also as NAME:SOURCE")
  dirs = dict(c["drafter_dirs"] or {})
  unknown = [m for m in dirs if m not in known]
  if unknown:
    raise ValueError(f"config.drafter_dirs names unknown method(s) {unknown}; known: {list(known)}")
  chosen = (AR,) + tuple(m for m in dict.fromkeys(c["methods"]) if m != AR)  # the baseline always runs
  for method in chosen[1:]:
    name, inline = split_method(method)
    if inline is not None:
      continue  # the registry's build checks its own sources
    if registry.get(name).needs_trained_dir and not dirs.get(name):
      raise ValueError(f"method {name!r} needs config.drafter_dirs.{name}: a directory written by "
                       f"scripts/train_draft.py, 'shipped' (the package's trained one) or 'untrained' (a freshly "
                       f"initialised head, to time it)")
    special = ("", None, registry.UNTRAINED, registry.SHIPPED)
    if dirs.get(name) not in special and not os.path.isdir(os.path.expanduser(dirs[name])):
      raise ValueError(f"config.drafter_dirs.{name}={dirs[name]!r} is not a directory: train it with "
                       f"python scripts/train_draft.py --config=configs/train_{name}.py, or drop {name!r} "
                       f"from config.methods")
  return chosen


def validate_config(config) -> dict:
  """Checks every setting before any model work; returns a plain dict of normalized settings."""
  c = dict(config.to_dict() if hasattr(config, "to_dict") else config)
  missing = [key for key in SETTINGS if key not in c]
  if missing:
    raise ValueError(f"config is missing {missing}: start from configs/bench_cpu.py, which sets every key")
  c["methods"] = _methods(c)
  try:
    check_weights(c["weights"])
  except ValueError as err:
    raise ValueError(f"config.weights: {err}") from None
  categories = tuple(c["categories"])
  unknown = [x for x in categories if x not in tasks.CATEGORIES]
  if unknown or not categories:
    raise ValueError(f"unknown or no categories {unknown or list(categories)}; known: {list(tasks.CATEGORIES)}")
  c["categories"] = tuple(dict.fromkeys(categories))
  c["auto_ks"] = _ints("auto_ks", c["auto_ks"], 1) if c["auto_ks"] else ()
  if c["auto_ks"]:
    SpeculationPolicy(ks=c["auto_ks"])  # names a bad list
  # No fixed K at all is allowed when the adaptive cells run: the policy against autoregressive decoding alone.
  c["ks"] = _ints("ks", c["ks"], 1) if c["ks"] or not c["auto_ks"] else ()
  if max(c["ks"] + c["auto_ks"]) > MAX_K:
    raise ValueError(f"config.ks must be <= {MAX_K}, got {list(c['ks'])}")
  c["batch_sizes"] = _ints("batch_sizes", c["batch_sizes"], 1)
  c["phase_split_batch_sizes"] = tuple(int(b) for b in c["phase_split_batch_sizes"])
  missing = [b for b in c["phase_split_batch_sizes"] if b not in c["batch_sizes"]]
  if missing:
    raise ValueError(f"phase_split_batch_sizes {missing} are not in batch_sizes {list(c['batch_sizes'])}")
  c["phase_split_methods"] = tuple(c["phase_split_methods"]) or c["methods"]  # () = every method
  missing = [m for m in c["phase_split_methods"] if m not in c["methods"]]
  if missing:
    raise ValueError(f"phase_split_methods {missing} are not in methods {list(c['methods'])}")
  temps = tuple(float(t) for t in c["temperatures"])
  if not temps or any(not np.isfinite(t) or t < 0 for t in temps):
    raise ValueError(f"config.temperatures must be finite numbers >= 0, got {list(temps)}")
  c["temperatures"] = temps
  for name, low in (("max_new_tokens", 1), ("prompts_per_category", 0), ("repeats", 1), ("draft_layers", 1),
                    ("layer_skip_layers", 0), ("prompt_bucket", 0), ("prompt_lookup_max_ngram", 1),
                    ("max_prompt_tokens", 0), ("paired_verify_calls", 0), ("seed", 0)):
    value = c[name]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
      raise ValueError(f"config.{name} must be an int >= {low}, got {value!r}")
  for category in c["categories"]:
    tasks.select(category, c["prompts_per_category"])  # raises if a category has fewer prompts
  if c["sweep"] not in SWEEPS:
    raise ValueError(f"config.sweep must be one of {SWEEPS}, got {c['sweep']!r}")
  if c["peers"] not in PEERS:
    raise ValueError(f"config.peers must be one of {PEERS}, got {c['peers']!r}")
  _trees(c)
  c["paired_reference"] = parse_reference(c["paired_reference"], c["methods"], c["ks"])
  if c["peers"] and c["model"] == "random":
    raise ValueError(f"config.peers={c['peers']!r} needs a model file (a GGUF or 'smollm2-135m'), not "
                     f"model='random'")
  if c["peers"] == "llama_cpp":
    from specjax.benchmark.llama_cpp import check_dir
    c["llama_cpp_dir"] = check_dir(c["llama_cpp_dir"])
  if not c["output_dir"]:
    raise ValueError("config.output_dir must be set")
  return c


def tree_key(n_nodes: int) -> str:
  return f"tree:{n_nodes}"


def _trees(c: dict) -> None:
  """Checks the tree settings and puts the cells' trees in c["trees"] (one per config.tree_nodes)."""
  from specjax.trees import DynamicTree, StaticTree
  from specjax.trees.rejection import BRANCHINGS
  c["tree_nodes"] = _ints("tree_nodes", c["tree_nodes"], 1) if c["tree_nodes"] else ()
  for name in ("tree_depth", "tree_top_k"):
    if isinstance(c[name], bool) or not isinstance(c[name], (int, np.integer)) or c[name] < 1:
      raise ValueError(f"config.{name} must be an int >= 1, got {c[name]!r}")
  if c["tree_branching"] not in BRANCHINGS:
    raise ValueError(f"config.tree_branching must be one of {list(BRANCHINGS)}, got {c['tree_branching']!r}")
  c["tree_methods"] = tuple(c["tree_methods"]) or tuple(
      m for m in c["methods"][1:] if registry.get(split_method(m)[0]).drafter.branches)
  missing = [m for m in c["tree_methods"] if m not in c["methods"][1:]]
  if missing:
    raise ValueError(f"tree_methods {missing} are not drafter methods of config.methods {list(c['methods'])}")
  if not isinstance(c["tree_per_category"], bool):
    raise ValueError(f"config.tree_per_category must be True or False, got {c['tree_per_category']!r}")
  if c["tree_kind"] not in TREE_KINDS:
    raise ValueError(f"config.tree_kind must be one of {list(TREE_KINDS)}, got {c['tree_kind']!r}")
  depth, width = int(c["tree_depth"]), int(c["tree_top_k"])
  if c["tree_kind"] in ("tuned", "fastest") and c["tree_nodes"]:
    n = c["tree_calibration_prompts"]
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
      raise ValueError(f"config.tree_calibration_prompts must be an int >= 1, got {n!r}")
    if not c["prompts_per_category"]:
      raise ValueError(f"config.tree_kind {c['tree_kind']!r} calibrates on the prompts after the measured ones; "
                       "prompts_per_category=0 measures them all, so none is left")
    for category in c["categories"]:
      tasks.select(category, n, skip=c["prompts_per_category"])  # raises if too few are left
  try:
    c["trees"] = tuple(
        DynamicTree(n, min(depth, n), width, c["tree_branching"]) if c["tree_kind"] == "dynamic"
        else StaticTree.balanced(n, width, c["tree_branching"]) if c["tree_kind"] == "static"
        else TunedTree(n, min(depth, n), width, c["tree_branching"], fastest=c["tree_kind"] == "fastest")
        for n in c["tree_nodes"])
  except ValueError as err:
    raise ValueError(f"config.tree_nodes / tree_depth / tree_top_k: {err}") from None


def plan(c: dict, max_k: dict | None = None, max_tree_depth: dict | None = None) -> list[Cell]:
  """Cells to run: AR at every batch size, plus each drafter method over K x batch size ('grid'), over K at the
  first batch size and over batch sizes at the first K ('axes'), or at the first K and batch size only, the first
  drafter method also at the last K and last batch size together ('smoke': every code path, fewest compilations);
  the adaptive K ("auto") at every batch size ('grid') or at the first; the token trees of config.tree_nodes at the
  first batch size, for each tree method. K above a method's max_k (e.g. Medusa's head count) is skipped; a
  dynamic tree deeper than a method drafts is grown only that deep, a static one skipped."""
  sweep, first_b = c["sweep"], c["batch_sizes"][0]
  first_k, last = (c["ks"][0], (c["ks"][-1], c["batch_sizes"][-1])) if c["ks"] else (None, None)
  cells = []
  for temp, batch in itertools.product(c["temperatures"], c["batch_sizes"]):
    cells.append(Cell(AR, 0, batch, temp))
    for i, method in enumerate(c["methods"][1:]):
      for k in c["ks"]:
        if k > (max_k or {}).get(method, MAX_K):
          continue
        if (sweep == "grid" or (batch == first_b and k == first_k)
            or (sweep == "axes" and (batch == first_b or k == first_k))
            or (sweep == "smoke" and i == 0 and (k, batch) == last)):
          cells.append(Cell(method, k, batch, temp))
      if c["auto_ks"] and (sweep == "grid" or batch == first_b):
        cells.append(Cell(method, AUTO, batch, temp))
      if batch == first_b and method in c.get("tree_methods", ()):
        deepest = (max_tree_depth or {}).get(method) or MAX_K
        cells.extend(Cell(method, tree_key(t.n_nodes), batch, temp, t)
                     for t in (_within(tree, deepest) for tree in c.get("trees", ())) if t is not None)
  return cells


def _within(tree, deepest: int):
  """`tree` for a drafter that drafts at most `deepest` levels: a dynamic (or still to be tuned) tree grown that
  deep, a static tree as it is or None (skipped) when it is deeper."""
  from specjax.trees import DynamicTree
  if tree.max_depth <= deepest:
    return tree
  if isinstance(tree, (DynamicTree, TunedTree)):
    try:
      return dataclasses.replace(tree, depth=deepest)
    except ValueError:   # too few proposals at that depth for its nodes
      return None
  return None
