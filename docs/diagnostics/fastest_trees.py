"""Which token tree is fastest on this CPU, and on the H200 of docs/results.md section 33, at the acceptance the
shipped feature head and the q4 self-draft show per category here (Sequoia's hardware-aware choice,
`specjax.trees.fastest`): issue 19's question whether the best tree can beat the best chain on a machine.

Measured in one process, SmolLM2-135M, greedy, batch 1:
- acceptance per depth and sibling rank, per drafter and category (`trees.tune.measure_acceptance`, a comb tree
  --depth deep and --width wide, the first --prompts benchmark prompts of each category);
- the target's verification of N + 1 positions against its one-position step (`benchmark.verify_cost`, trees);
- each drafter's call over w rows against that step, paired: the head's decoder layer, draft-vocabulary head,
  distribution and top-k ranking; the q4 model's scoring call;
- a round's remaining cost (acceptance walk, commit, the loop) as the residual of the fused chain at K=4.
Then per drafter and category: the fastest tree and the best chain under these costs, and under the H200's.

  python docs/diagnostics/fastest_trees.py --prompts=2 --out=results/fastest_trees.json
"""
import argparse
import json
import os
import platform
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402

import specjax  # noqa: E402
from specjax.benchmark import tasks  # noqa: E402
from specjax.benchmark.placement import core_round_trip_us, placement  # noqa: E402
from specjax.benchmark import round_costs  # noqa: E402
from specjax.cli import drafter_from_config, model_from_source  # noqa: E402
from specjax.trees import StaticTree, tune  # noqa: E402
from specjax.trees.fastest import MeasuredRoundCost, ranked_choices  # noqa: E402

CATEGORIES = ("code", "prose", "structured", "long_context")
GREEDY = specjax.SamplingParams(temperature=0.0)
# docs/results.md section 33 (an H200, Llama-3-8B-shaped target, bfloat16): verify / step by positions (chains up
# to 9, trees beyond), the 1B draft's call over w rows / its step, and each drafter's step / the target's.
H200 = {"verify_by_positions": {1: 1.0, 2: 0.99, 3: 1.01, 5: 1.02, 9: 1.07, 17: 1.13, 33: 1.26, 65: 1.48},
        "draft_step": {"feature_head": 0.70 / 6.81, "quantized:q4": 1.98 / 6.81},
        "draft_by_width": {"feature_head": None, "quantized:q4": {1: 1.0, 2: 0.98, 4: 0.98, 10: 1.07}}}


def decode_ms_per_round(target, prompts, **kwargs) -> float:
  """Fused decode ms per round (prefill excluded), median of 3 calls after a compiling one."""
  specjax.generate(target, prompts[:1], chat=True, max_new_tokens=64, sampling=GREEDY, **kwargs)
  return float(np.median([round_costs.decode_ms_per_round(specjax.generate(
      target, prompts[:1], chat=True, max_new_tokens=64, sampling=GREEDY, **kwargs)) for _ in range(3)]))


def measure(args) -> dict:
  target = model_from_source("smollm2-135m")
  drafters = {"feature_head": drafter_from_config("feature_head", target, "shipped"),
              "quantized:q4": drafter_from_config("quantized", target, "q4")}
  prompts = {cat: [p["prompt"] for p in tasks.select(cat, args.prompts)] for cat in CATEGORIES}
  run = {"machine": platform.platform(), "cpu": platform.processor() or platform.machine(), "filled": args.filled,
         "calls": args.calls, "depth": args.depth, "width": args.width, "prompts": args.prompts}
  run["placements"] = {}

  def with_placement(positions, measure):
    before = placement(core_round_trip_us())
    ratio = measure()
    run["placements"][positions] = [before, placement(core_round_trip_us())]   # the host's vCPU placement (s54)
    print(f"verify {positions} positions: {ratio:.3f} steps ({run['placements'][positions]})", flush=True)
    return ratio

  run["verify_by_positions"] = round_costs.verify_curve(target, args.nodes, width=args.width, filled=args.filled,
                                                        cache_size=args.filled + 64, calls=args.calls,
                                                        each=with_placement)
  run["draft_step"], run["draft_by_width"], step_ms = {}, {}, []
  for name, drafter in drafters.items():
    draft = round_costs.draft_costs(target, drafter, filled=args.filled, calls=args.calls)
    run["draft_step"][name], run["draft_by_width"][name] = draft["draft_step"], draft["draft_by_width"]
    step_ms.append(draft["step_ms"])
  print(f"draft steps {run['draft_step']}, widths {run['draft_by_width']}", flush=True)
  step_ms = float(np.mean(step_ms))
  run["step_ms"], run["acceptance"], run["overhead"], run["ar_round"] = step_ms, {}, {}, {}
  for cat in CATEGORIES:
    run["ar_round"][cat] = decode_ms_per_round(target, prompts[cat]) / step_ms
    for name, drafter in drafters.items():
      table = tune.measure_acceptance(target, drafter, prompts[cat], depth=args.depth, width=args.width,
                                      max_new_tokens=64, sampling=GREEDY, chat=True)
      run["acceptance"][f"{name}/{cat}"] = table
      chain = decode_ms_per_round(target, prompts[cat], drafter=drafter, k=4) / step_ms
      parts = _cost(run, name, 0.0)(StaticTree.chain(4))
      run["overhead"][f"{name}/{cat}"] = max(chain - parts, 0.0)
      print(f"{name} {cat}: acceptance {table}, chain K=4 round {chain:.2f} steps (parts {parts:.2f})", flush=True)
  return run


def _cost(costs: dict, name: str, overhead: float) -> MeasuredRoundCost:
  return MeasuredRoundCost(verify_by_positions=costs["verify_by_positions"], draft_step=costs["draft_step"][name],
                           draft_by_width=costs["draft_by_width"][name], overhead=overhead)


def _describe(choice, ar_round: float) -> str:
  """The choice's shape, expected tokens a round and predicted speedup over autoregressive rounds of ar_round
  steps."""
  tree = choice.tree
  shape = f"K={tree.n_nodes}" if choice.is_chain else f"{tree.n_nodes} nodes, {tree.max_depth} deep"
  return f"{shape}: {choice.expected_tokens:.2f}, {choice.speedup * ar_round:.2f}x"


def report(run: dict, max_nodes: int) -> str:
  """Markdown: per drafter and category, the best chain and the fastest tree under this CPU's costs and the
  H200's (speedup over autoregressive decoding; the H200 row carries no per-round overhead)."""
  from specjax.trees.expected import measured_rates
  lines = [f"Costs in target steps ({run['step_ms']:.2f} ms here): verify by positions "
           + ", ".join(f"{n}: {r:.2f}" for n, r in sorted((int(a), b) for a, b in run["verify_by_positions"].items()))
           + "; draft steps " + ", ".join(f"{k} {v:.3f}" for k, v in run["draft_step"].items())
           + "; a call over w rows / one row: " + ", ".join(
               f"{k} " + " ".join(f"{w}: {r:.2f}" for w, r in v.items()) for k, v in run["draft_by_width"].items())
           + "; overhead a round " + ", ".join(f"{k} {v:.2f}" for k, v in run["overhead"].items())
           + "; autoregressive round " + ", ".join(f"{k} {v:.2f}" for k, v in run["ar_round"].items()), "",
           "| drafter | category | costs | best chain: tokens a round, speedup | fastest tree | tree / chain |",
           "| --- " * 6 + "|"]
  for key, table in run["acceptance"].items():
    name, cat = key.split("/")
    rates = measured_rates(table)
    for machine in ("this CPU", "H200"):
      if machine == "this CPU":
        cost, scale = _cost(run, name, run["overhead"][key]), run["ar_round"][cat]
        nodes = min(max_nodes, cost.max_nodes)
      else:
        cost = MeasuredRoundCost(H200["verify_by_positions"], H200["draft_step"][name], H200["draft_by_width"][name])
        scale, nodes = 1.0, max_nodes
      choices = ranked_choices(rates, cost, range(1, nodes + 1), run["depth"])
      chain = next(c for c in choices if c.is_chain)
      tree = next((c for c in choices if not c.is_chain), None)
      lines.append(f"| {name} | {cat} | {machine} | {_describe(chain, scale)} | "
                   f"{_describe(tree, scale) if tree else '-'} | {tree.speedup / chain.speedup if tree else 0:.3f} |")
  return "\n".join(lines)


def validate(run: dict, bench_path: str) -> str:
  """Markdown: the cost model against a benchmark run's trees (`scripts/benchmark.py` with tree cells and
  `paired_reference` a chain at K=4): each tree's round cost over the chain's, predicted at the tokens a round the
  run measured, beside the ratio of their paired speedups."""
  with open(bench_path) as f:
    records = json.load(f)
  paired = {(r["method"], r["category"], str(r["k"])): r for r in records if r["method"] != "ar"}
  lines = ["| drafter | category | tree | tok/round, tree / chain K=4 | predicted speed, tree / chain | measured |",
           "| --- " * 6 + "|"]
  for (name, cat, k), rec in sorted(paired.items()):
    chain = paired.get((name, cat, "4"))
    if not k.startswith("tree") or chain is None or f"{name}/{cat}" not in run["overhead"]:
      continue
    tree = StaticTree(tuple(tuple(p) for p in rec["tree"]["paths"]))
    cost = _cost(run, name, run["overhead"][f"{name}/{cat}"])
    predicted = (rec["tokens_per_round"] / cost(tree)) / (chain["tokens_per_round"] / cost(StaticTree.chain(4)))
    speed = lambda r: (r.get("paired_vs_reference") or {"speedup": 1.0})["speedup"]
    lines.append(f"| {name} | {cat} | {len(tree.paths)} nodes, {tree.max_depth} deep | "
                 f"{rec['tokens_per_round'] / chain['tokens_per_round']:.3f} | {predicted:.3f} | "
                 f"{speed(rec) / speed(chain):.3f} |")
  return "\n".join(lines)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--prompts", type=int, default=2)
  parser.add_argument("--depth", type=int, default=6)
  parser.add_argument("--width", type=int, default=4)
  parser.add_argument("--filled", type=int, default=160)
  parser.add_argument("--calls", type=int, default=20)
  parser.add_argument("--nodes", type=lambda s: tuple(int(x) for x in s.split(",")), default=(1, 2, 3, 4, 5, 6, 8,
                                                                                             12, 16))
  parser.add_argument("--max_nodes", type=int, default=16)
  parser.add_argument("--out", default="results/fastest_trees.json")
  parser.add_argument("--report", default="", help="a run's json: print its report, measure nothing")
  parser.add_argument("--bench", default="", help="a benchmark run's results.json: check the cost model on its trees")
  args = parser.parse_args()
  if args.report:
    with open(args.report) as f:
      run = json.load(f)
    print(report(run, args.max_nodes))
    if args.bench:
      print("\n" + validate(run, args.bench))
    return
  run = measure(args)
  os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(run, f, indent=1)
  print(report(run, args.max_nodes))


if __name__ == "__main__":
  main()
