"""The benchmark's token-tree cells: their trees tuned to each method (config.tree_kind "tuned") or chosen for this
machine's measured round costs ("fastest"), and the tree theory beside what they measured."""

import dataclasses

import numpy as np

from specjax.benchmark import round_costs, tasks, theory
from specjax.benchmark.plan import TunedTree
from specjax.generate import generate
from specjax.trees import StaticTree, tune
from specjax.trees.fastest import ranked_choices

VERIFY_POINTS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48)   # tree sizes whose verification a "fastest" cell times


def tune_trees(cells, target, drafters, c, encode, progress=True):
  """The run's (cell, category) units, each "tuned" tree cell with its method's static tree (`specjax.trees.tune`):
  the acceptance per depth and rank is measured once per method, depth, width, temperature and batch size (at that
  batch) with a comb tree on config.tree_calibration_prompts prompts per category, those after the measured ones
  (`encode`: a prompt's text to token ids); with config.tree_per_category, per category on that category's. A
  "fastest" cell takes instead the tree of at most N nodes that is fastest at that acceptance and this machine's
  round costs, measured here (`fastest_tree`). Returns the units and, per (method, k, temperature, category) of a
  tuned cell, what it was tuned on."""
  tables, tuning, units, machine = {}, {}, [], {}
  groups = [(cat,) for cat in c["categories"]] if c["tree_per_category"] else [tuple(c["categories"])]
  for cell in cells:
    spec = cell.tree
    if not isinstance(spec, TunedTree):
      units += [(cell, cat) for cat in c["categories"]]
      continue
    by_category = {}
    run = dict(max_new_tokens=c["max_new_tokens"], sampling=cell.sampling, seed=c["seed"],
               stop_at_eos=c["stop_at_eos"])   # the calibration's generation settings
    for group in groups:
      key = (cell.method, spec.depth, spec.width, spec.branching, cell.temperature, cell.batch_size, group)
      prompts = [encode(p["prompt"]) for cat in group
                 for p in tasks.select(cat, c["tree_calibration_prompts"], skip=c["prompts_per_category"])]
      if key not in tables:
        if progress:
          print(f"tuning {cell.method}'s static trees: a comb {spec.depth} deep and {spec.width} wide over "
                f"{len(prompts)} calibration prompts ({', '.join(group)})", flush=True)
        tables[key] = tune.measure_acceptance(target, drafters[cell.method], prompts, depth=spec.depth,
                                              width=spec.width, branching=spec.branching,
                                              batch_size=cell.batch_size, **run)
      record = {"acceptance_by_depth_and_rank": tables[key], "comb": {"depth": spec.depth, "width": spec.width},
                "categories": list(group), "prompts_per_category": c["tree_calibration_prompts"],
                "skipped_per_category": c["prompts_per_category"]}
      if spec.fastest:
        choice, record["fastest"] = fastest_tree(target, drafters[cell.method], cell.method, spec, tables[key],
                                                 prompts, run, c, machine, progress)
        tree = choice.tree
      else:
        tree = tune.tuned_tree(spec.n_nodes, tables[key], spec.depth, spec.branching)
      for cat in group:
        tuning[(cell.method, cell.k, cell.temperature, cat)] = record
        by_category[cat] = dataclasses.replace(cell, tree=tree)
    units += [(by_category[cat], cat) for cat in c["categories"]]
  return units, tuning


def fastest_tree(target, drafter, method: str, spec, table, prompts, run: dict, c, machine: dict, progress=True):
  """(TreeChoice, record): the tree of at most spec.n_nodes nodes and spec.depth levels with the most expected
  tokens per unit of round cost at the measured acceptance `table`, its cost measured here: the target's
  verification curve and `method`'s call over 1-8 rows (once a run, kept in `machine`), and the rest of a round as
  the residual of a warm round of a chain of min(4, depth) on the first calibration prompt (generated with `run`,
  the calibration's settings)."""
  filled = int(np.mean([len(p) for p in prompts])) + c["max_new_tokens"] // 2
  calls = max(c["paired_verify_calls"], 20)
  if progress:
    print(f"measuring the round's costs for the fastest tree of {spec.n_nodes} nodes ({calls} pairs a point)",
          flush=True)
  verify = machine.setdefault("verify_by_positions", {1: 1.0})
  if max(verify) < spec.n_nodes + 1:   # measured once a run, extended for a later cell with more nodes
    nodes = {n for n in VERIFY_POINTS if max(verify) <= n < spec.n_nodes} | {spec.n_nodes}
    verify.update(round_costs.verify_curve(target, nodes, width=spec.width, filled=filled,
                                           cache_size=filled + spec.n_nodes + 64, calls=calls))
  if ("draft", method) not in machine:
    machine["draft", method] = round_costs.draft_costs(target, drafter, filled=filled, calls=calls)
  draft = machine["draft", method]
  chain = StaticTree.chain(min(4, spec.depth), spec.branching)
  for _ in range(2):   # batch 1, as the costs above; the first call compiles
    timed = generate(target, prompts[:1], drafter=drafter, tree=chain, **run)
  cost = round_costs.round_cost(round_costs.never_cheaper(verify), draft, chain,
                                round_costs.decode_ms_per_round(timed))
  choices = ranked_choices(theory.measured_rates(table), cost, range(1, spec.n_nodes + 1), spec.depth,
                           spec.branching)
  describe = lambda choice: {"paths": [list(p) for p in choice.tree.paths], "chain": choice.is_chain,
                             "expected_tokens": choice.expected_tokens, "round_cost_steps": choice.cost,
                             "speedup_over_ar_steps": choice.speedup}
  best_chain = next(choice for choice in choices if choice.is_chain)
  tree = next((choice for choice in choices if not choice.is_chain), None)
  record = {"verify_by_positions": {str(n): r for n, r in sorted(verify.items())}, **draft,
            "timed_chain": len(chain.paths),
            "overhead_steps": cost.overhead, "chosen": describe(choices[0]), "best_chain": describe(best_chain),
            "best_branching_tree": describe(tree) if tree else None}
  if progress:
    print(f"fastest: {len(choices[0].tree.paths)} nodes, {choices[0].tree.max_depth} deep "
          f"({'a chain' if choices[0].is_chain else 'a tree'}), {choices[0].speedup:.2f}x over AR steps predicted"
          f" (best chain {best_chain.speedup:.2f}x)", flush=True)
  return choices[0], record


def tree_kind(record) -> str:
  """How a tree cell's tree was made: "fastest", "tuned" (to the calibration prompts) or its own kind."""
  calibration = record.get("tree_calibration") or {}
  return ("fastest" if "fastest" in calibration else "tuned") if calibration else record["tree"]["kind"][:-4].lower()


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
