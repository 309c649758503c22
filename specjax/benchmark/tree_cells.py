"""The benchmark's token-tree cells: their trees tuned to each method (config.tree_kind "tuned") and the tree theory
beside what they measured."""

import dataclasses

from specjax.benchmark import tasks, theory
from specjax.benchmark.plan import TunedTree
from specjax.trees import StaticTree, tune


def tune_trees(cells, target, drafters, c, encode, progress=True):
  """Each "tuned" tree cell with its method's static tree (`specjax.trees.tune`): the acceptance per depth and rank
  is measured once per method, depth, width and temperature with a comb tree on config.tree_calibration_prompts
  prompts per category, those after the measured ones (`encode`: a prompt's text to token ids). Returns the cells
  and, per (method, k, temperature) of a tuned cell, what it was tuned on."""
  tables, tuning, tuned = {}, {}, []
  for cell in cells:
    spec = cell.tree
    if not isinstance(spec, TunedTree):
      tuned.append(cell)
      continue
    key = (cell.method, spec.depth, spec.width, spec.branching, cell.temperature)
    if key not in tables:
      prompts = [encode(p["prompt"]) for cat in c["categories"]
                 for p in tasks.select(cat, c["tree_calibration_prompts"], skip=c["prompts_per_category"])]
      if progress:
        print(f"tuning {cell.method}'s static trees: a comb {spec.depth} deep and {spec.width} wide over "
              f"{len(prompts)} calibration prompts", flush=True)
      tables[key] = tune.measure_acceptance(target, drafters[cell.method], prompts, depth=spec.depth,
                                            width=spec.width, max_new_tokens=c["max_new_tokens"],
                                            branching=spec.branching, sampling=cell.sampling, seed=c["seed"],
                                            stop_at_eos=c["stop_at_eos"])
    tree = tune.tuned_tree(spec.n_nodes, tables[key], spec.depth, spec.branching)
    tuning[(cell.method, cell.k, cell.temperature)] = {
        "acceptance_by_depth_and_rank": tables[key], "comb": {"depth": spec.depth, "width": spec.width},
        "prompts_per_category": c["tree_calibration_prompts"], "skipped_per_category": c["prompts_per_category"]}
    tuned.append(dataclasses.replace(cell, tree=tree))
  return tuned, tuning


def tree_theory(rec, tree):
  """Expected tokens per round from the measured acceptance per depth and rank (Sequoia / EAGLE-2): of the static
  tree itself, or for a dynamic tree, of the best static tree of its N nodes and depth at those rates (a dynamic
  tree reshapes itself per row and round, so it may do better)."""
  by_rank = rec.get("acceptance_by_rank")
  if not by_rank or by_rank[0] is None:
    rec["theory_gap"] = "no tree rounds: no per-rank acceptance to predict from"
    return
  rates = theory.measured_rates(rec.get("acceptance_by_depth_and_rank") or [by_rank], by_rank)
  shape = tree if isinstance(tree, StaticTree) else theory.best_tree(tree.n_nodes, rates, tree.max_depth,
                                                                     tree.branching)
  expected = theory.tree_expected_tokens(shape, rates)
  rec["expected_tokens_per_round"] = expected
  measured = rec.get("tokens_per_round")
  which = "this static tree" if shape is tree else f"the best static tree of {tree.n_nodes} nodes at these rates"
  first = ", ".join(f"{p:.2f}" for p in rates[0])
  rec["theory_gap"] = (f"tokens per round: measured {measured:.2f} vs {expected:.2f} expected for {which} from the "
                       f"measured acceptance per depth and rank (depth 1: {first}; independent across depths"
                       f"{'; the dynamic tree reshapes itself per round' if shape is not tree else ''})"
                       if measured is not None else f"{expected:.2f} tokens per round expected for {which}")
