"""Accelerator round costs of a Llama-3-8B-shaped target with a Llama-3.2-1B-shaped draft (configs/llama3_8b_1b.py)
in bfloat16 with random weights (timing does not depend on them), and an EAGLE-style head's step beside them
(one decoder layer of the target's width and its vocabulary): docs/results.md section 33.

Measures, each paired with the one-position step from the same cache fill (`benchmark.verify_cost`): the target's
verify over N positions as a chain and as a balanced tree of N - 1 nodes, the draft's calls over 1..10 positions
(a tree round's draft calls), and the head's step. Records are written as they finish, so a run cut short keeps
what it measured; measurements come in order of need and stop once --budget_s is spent.

  python docs/diagnostics/accelerator_costs.py --out=results/accelerator            # on the accelerator
  python docs/diagnostics/accelerator_costs.py --tiny --out=/tmp/acc                # tiny shapes, any machine
  python docs/diagnostics/accelerator_costs.py --predict=results/accelerator/costs.json   # speedups, anywhere
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from configs.llama3_8b_1b import DRAFT, TARGET  # noqa: E402
from specjax.trees.fastest import draft_calls, interpolate  # noqa: E402
from specjax.benchmark import theory  # noqa: E402
from specjax.config import ModelConfig  # noqa: E402
from specjax.trees import StaticTree  # noqa: E402

TREE_WIDTH = 4
# A lower-ranked child's acceptance once its higher-ranked siblings failed (`theory.rank_acceptance`): assumed, as in
# specjax.aot.settings; no tree acceptance was measured at this pair's scale.
SIBLING_RATES = (0.25, 0.5)
# (what, positions or nodes) in order of need: the chain K=4 round first, then a 16-node tree, then the rest.
# Each pairs N positions with the one-position step; a tree of N - 1 nodes is verified in N positions (its root too).
PLAN = (("target_chain", 5), ("draft", 2), ("target_tree", 17), ("target_chain", 17), ("head", 2),
        ("target_chain", 9), ("target_tree", 9), ("target_chain", 3), ("draft", 4), ("draft", 10),
        ("target_chain", 2), ("target_chain", 33), ("target_tree", 33), ("target_tree", 65), ("target_chain", 65),
        ("target_chain_b8", 5))

# Acceptance measured on SmolLM2-135M here (tokens per round at K, greedy, batch 1), per drafter and task, with the
# docs/results.md section each comes from; the drafter's kind says whose cost it drafts at.
MEASURED = (
    ("feature head, code (s32)", "head", 4, 1.89), ("feature head, prose (s32)", "head", 4, 1.49),
    ("feature head, structured (s32)", "head", 4, 2.83), ("feature head, long context (s32)", "head", 4, 1.43),
    ("4-layer distilled draft, code (s1)", "draft", 2, 1.28),
    ("4-layer distilled draft, structured (s1)", "draft", 2, 1.30),
    ("int8 self-draft, median (s12)", "draft", 4, theory.expected_tokens_per_round(0.958, 4)),
)


def configs(tiny: bool) -> dict:
  target = ModelConfig.from_dict(TARGET)
  draft = ModelConfig.from_dict(DRAFT)
  if tiny:
    target = target.replace(vocab_size=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128,
                            max_seq_len=512, eos_token_ids=(), bos_token_id=-1)
    draft = target.replace(n_layers=1, d_model=32, head_dim=0)
  head = target.replace(n_layers=1)
  return {"target": target, "draft": draft, "head": head}


def measure(args) -> None:
  import jax
  from specjax.benchmark.verify_cost import paired_verify_cost
  from specjax.model import init_model

  os.makedirs(args.out, exist_ok=True)
  path = os.path.join(args.out, "costs.json")
  shapes = configs(args.tiny)
  filled, cache = (100, 256) if args.tiny else (args.filled, 2 * args.filled)
  device = jax.devices()[0]
  if not args.tiny and jax.default_backend() == "cpu":
    raise SystemExit("no accelerator: JAX runs on the CPU (use --tiny to check the script here)")
  run = {"device": getattr(device, "device_kind", str(device)), "backend": jax.default_backend(),
         "jax": jax.__version__, "python": platform.python_version(), "filled": filled, "cache_size": cache,
         "calls": args.calls, "configs": {k: v.to_dict() for k, v in shapes.items()}, "records": []}
  run["copy_gb_per_s"] = _copy_bandwidth(64 << 20 if args.tiny else 4 << 30)
  print(f"device copy: {run['copy_gb_per_s']:.0f} GB/s (bytes read and written)", flush=True)
  start, models = time.perf_counter(), {}
  for what, n in PLAN:
    if time.perf_counter() - start > args.budget_s:
      print(f"budget spent: stopping before {what} {n}", flush=True)
      break
    who = what.split("_")[0]
    t0 = time.perf_counter()
    if who not in models:   # all three stay resident (21 GB in bfloat16): none is made twice
      models[who] = init_model(shapes[who], seed=0)
      jax.block_until_ready(models[who].params)
      print(f"{who}: {shapes[who].param_count() / 1e9:.2f}B parameters in {time.perf_counter() - t0:.1f} s",
            flush=True)
    tree = StaticTree.balanced(n - 1, width=TREE_WIDTH) if what == "target_tree" else None
    batch = 8 if what.endswith("_b8") else 1
    try:
      record = paired_verify_cost(models[who], batch=batch, k=n - 1, filled=filled, cache_size=cache,
                                  calls=args.calls, tree=tree)
    except Exception as err:  # a failed cell is recorded and the rest still run
      record = {"error": f"{type(err).__name__}: {err}"[:500]}
    record.update(what=what, positions=n, seconds=time.perf_counter() - t0)
    run["records"].append(record)
    print(json.dumps(record), flush=True)
    with open(path + ".tmp", "w") as f:
      json.dump(run, f, indent=1)
    os.replace(path + ".tmp", path)
  print(f"wrote {path} after {time.perf_counter() - start:.0f} s", flush=True)


def _copy_bandwidth(n_bytes: int) -> float:
  """GB/s of an on-device copy of n_bytes (read and written counted), the best of 10: the memory roofline."""
  import jax
  import jax.numpy as jnp
  x = jnp.zeros((n_bytes // 4,), jnp.float32)
  copy = jax.jit(lambda x: x + 1.0)
  jax.block_until_ready(copy(x))
  best = float("inf")
  for _ in range(10):
    t0 = time.perf_counter()
    jax.block_until_ready(copy(x))
    best = min(best, time.perf_counter() - t0)
  return 2 * n_bytes / best / 1e9


def _alpha(tokens: float, k: int) -> float:
  """The i.i.d. acceptance rate whose expected tokens per round at K is `tokens` (bisection: E rises with alpha)."""
  lo, hi = 0.0, 1.0
  for _ in range(60):
    mid = 0.5 * (lo + hi)
    lo, hi = (mid, hi) if theory.expected_tokens_per_round(mid, k) < tokens else (lo, mid)
  return 0.5 * (lo + hi)


def _roofline_ms(run: dict, who: str) -> float:
  """Milliseconds to read a model's bfloat16 weights and a batch-1 cache of run["filled"] positions once."""
  config = ModelConfig.from_dict(run["configs"][who])
  kv = 2 * config.n_layers * config.n_kv_heads * config.head_dim_ * run["filled"]
  return 2 * (config.param_count() + kv) / (run["copy_gb_per_s"] * 1e6)


def predict(path: str) -> str:
  """Markdown: the measured costs, then the predicted speedup of each SmolLM2-measured acceptance at them."""
  with open(path) as f:
    run = json.load(f)
  good = [r for r in run["records"] if "error" not in r]
  target = [r for r in good if r["what"].startswith("target") and not r["what"].endswith("_b8")]
  ar_ms = statistics.median([r["step_ms"] for r in target])   # every paired step's
  chain = {r["positions"]: r["ratio"] for r in target if r["what"] == "target_chain"}
  trees = {r["positions"]: r["ratio"] for r in target if r["what"] == "target_tree"}
  draft = {r["positions"]: r["ratio"] for r in good if r["what"] == "draft"}
  draft_step = {who: statistics.median([r["step_ms"] for r in good if r["what"] == who]) / ar_ms
                for who in ("draft", "head") if any(r["what"] == who for r in good)}
  draft_width = {1: 1.0, **{n: ratio for n, ratio in draft.items() if n > 1}}
  lines = [f"Device: {run['device']} ({run['backend']}, jax {run['jax']}); {run['filled']} cached positions, "
           f"batch 1, medians of {run['calls']} alternated pairs.", "",
           f"Target step {ar_ms:.2f} ms ({_roofline_ms(run, 'target'):.2f} ms to read its weights and cache at "
           f"{run['copy_gb_per_s']:.0f} GB/s); draft (1B) step {draft_step.get('draft', float('nan')):.3f} of it; "
           f"EAGLE-style head step {draft_step.get('head', float('nan')):.3f} of it.", "",
           "| positions N | chain verify / step | tree of N - 1 nodes / step | 1B draft call / its step |",
           "| --- | --- | --- | --- |"]
  for n in sorted(set(chain) | set(trees) | set(draft)):
    cell = lambda table: f"{table[n]:.3f}" if n in table else ""
    lines.append(f"| {n} | {cell(chain)} | {cell(trees)} | {cell(draft)} |")
  batch8 = [r for r in good if r["what"] == "target_chain_b8"]
  if batch8:
    lines += ["", f"Batch 8: step {batch8[0]['step_ms']:.2f} ms, 5 positions a row {batch8[0]['ratio']:.3f}x it."]
  lines += ["", "| acceptance measured on SmolLM2 | drafts with | alpha | best chain: K, tokens/round, speedup | "
            + " | ".join(f"best measured tree, sibling rate {rate}: nodes, tokens/round, speedup"
                         for rate in SIBLING_RATES) + " |", "| --- " * (4 + len(SIBLING_RATES)) + "|"]
  for name, who, k, tokens in MEASURED:
    if who not in draft_step or not chain:
      continue
    c, alpha = draft_step[who], _alpha(tokens, k)
    options = [(theory.corrected_speedup(alpha, kk, c, interpolate(chain, kk + 1, hold_ends=True)), kk)
               for kk in range(1, 9)
               if kk + 1 <= max(chain)]
    speed, best_k = max(options) if options else (float("nan"), 0)
    cells = [f"{name} | {who} | {alpha:.3f} | K={best_k}, {theory.expected_tokens_per_round(alpha, best_k):.2f}, "
             f"{speed:.2f}x"]
    for rate in SIBLING_RATES:
      tree_cells = []
      for n, ratio in trees.items():
        tree = StaticTree.balanced(n - 1, width=TREE_WIDTH)
        tokens_tree = theory.tree_expected_tokens(tree, theory.rank_acceptance(alpha, rate, TREE_WIDTH))
        draft_cost = sum(c * (interpolate(draft_width, w, hold_ends=True) if who == "draft" else 1.0)
                         for w in draft_calls(tree))
        tree_cells.append((tokens_tree / (draft_cost + ratio), n - 1, tokens_tree))
      if tree_cells:
        tree_speed, nodes, tree_tokens = max(tree_cells)
        cells.append(f"{nodes}, {tree_tokens:.2f}, {tree_speed:.2f}x")
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--out", default="results/accelerator")
  parser.add_argument("--tiny", action="store_true", help="tiny shapes: checks the script on any machine")
  parser.add_argument("--filled", type=int, default=2048, help="cached positions each call reads")
  parser.add_argument("--calls", type=int, default=50, help="alternated pairs per measurement")
  parser.add_argument("--budget_s", type=float, default=420.0, help="no new measurement starts after this")
  parser.add_argument("--predict", default="", help="a costs.json: print the predicted speedups and stop")
  args = parser.parse_args()
  if args.predict:
    print(predict(args.predict))
    return
  measure(args)
  print(predict(os.path.join(args.out, "costs.json")))


if __name__ == "__main__":
  main()
