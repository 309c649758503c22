"""`write_outputs(records, settings, output_dir)`: results.json, report.md (tables a person reads first) and plots."""

import json
import os

import numpy as np

from specjax.benchmark import sandbox
from specjax.benchmark.metrics import geometric_mean
from specjax.benchmark.reference import reference_section
from specjax.benchmark.tables import fmt, markdown_table
from specjax.benchmark.tree_cells import tree_kind


def _ours(records):
  return [r for r in records if r.get("implementation", "specjax") == "specjax"]


def _k_order(k):
  """Fixed K in order, then "auto"."""
  return (isinstance(k, str), k if not isinstance(k, str) else 0)


def _spec_methods(records):
  return sorted({r["method"] for r in _ours(records)} - {"ar"})


def speedup_key(rows) -> str:
  """The speedup the tables show: the median over back-to-back pairs with autoregressive calls where every row was
  paired (`paired_with_ar`), else the ratio to the autoregressive cell, which drifts with the machine between cells."""
  return "paired_speedup_vs_ar" if rows and all(r.get("paired_speedup_vs_ar") is not None for r in rows) \
      else "speedup_vs_ar"


def speedup_by_category_table(records, method, batch, temperature) -> str:
  rows = [r for r in _ours(records) if r["method"] == method and r["batch_size"] == batch
          and r["temperature"] == temperature]
  ks = sorted({r["k"] for r in rows}, key=_k_order)
  cats = list(dict.fromkeys(r["category"] for r in rows))
  key = speedup_key(rows)
  cell = {(r["category"], r["k"]): r[key] for r in rows}
  body = [[cat] + [cell.get((cat, k)) for k in ks] for cat in cats]
  return markdown_table(["category"] + [f"K={k}" for k in ks], body)


def speedup_by_batch_table(records, method, temperature) -> str:
  rows = [r for r in _ours(records) if r["method"] == method and r["temperature"] == temperature]
  ks = sorted({r["k"] for r in rows}, key=_k_order)
  batches = sorted({r["batch_size"] for r in rows})
  key = speedup_key(rows)
  body = [[b] + [geometric_mean([r[key] for r in rows if r["batch_size"] == b and r["k"] == k])
                 for k in ks] for b in batches]
  return markdown_table(["batch size"] + [f"K={k}" for k in ks], body)


def adaptive_section(ours) -> list[str]:
  """The adaptive policy against autoregressive decoding in every (category, batch size, temperature) cell; with
  `paired_with_ar`, also the median ratio over back-to-back pairs of calls (the lowest cell is taken from it)."""
  rows = [r for r in ours if r["k"] == "auto"]
  if not rows:
    return []
  column = speedup_key(rows)
  paired = column != "speedup_vs_ar"
  worst = min(rows, key=lambda r: r[column] or 0.0)
  table = [[r["method"], r["category"], r["batch_size"], r["temperature"], r.get("mean_k"), r["tokens_per_round"],
            r["speedup_vs_ar"]] + ([r["paired_speedup_vs_ar"], r["paired_speedup_vs_ar_min"]] if paired else [])
           for r in rows]
  return [f"## Adaptive K (`k=\"auto\"`): speedup vs autoregressive in every cell (lowest{' paired' if paired else ''}: "
          f"{fmt(worst[column])}, {worst['method']} {worst['category']} B={worst['batch_size']} "
          f"T={worst['temperature']:g})", "",
          markdown_table(["method", "category", "B", "T", "mean K", "tok/round", "speedup"]
                         + (["paired median", "paired min"] if paired else []), table), ""]


def stops_paying_section(ours) -> list[str]:
  """Per category and method: the smallest batch size at which no fixed K beats autoregressive decoding."""
  fixed = [r for r in ours if r["method"] != "ar" and not isinstance(r["k"], str) and r["speedup_vs_ar"]]
  if not fixed:
    return []
  rows = []
  for method in sorted({r["method"] for r in fixed}):
    for temp in sorted({r["temperature"] for r in fixed}):
      for cat in dict.fromkeys(r["category"] for r in fixed):
        best = {}
        for r in fixed:
          if (r["method"], r["temperature"], r["category"]) == (method, temp, cat):
            best[r["batch_size"]] = max(best.get(r["batch_size"], 0.0), r["speedup_vs_ar"])
        stops = next((b for b in sorted(best) if best[b] < 1.0), None)
        rows.append([method, cat, temp, stops if stops is not None else f"> {max(best)}",
                     " ".join(f"B{b}:{best[b]:.2f}" for b in sorted(best))])
  return ["## Where speculation stops paying (smallest batch size whose best fixed K is below 1x)", "",
          markdown_table(["method", "category", "T", "stops paying at B", "best speedup by batch"], rows), ""]


def drafters_section(ours) -> list[str]:
  """Every drafter side by side per category, K, batch size and temperature: acceptance, tokens per round, the
  draft cost ratio c (phase-split cells) and the speedup (and the paired one, which orders the rows, when measured)."""
  rows = [r for r in ours if r["method"] != "ar"]
  if len({r["method"] for r in rows}) < 2:
    return []
  best = speedup_key(rows)
  paired = best != "speedup_vs_ar"
  rows.sort(key=lambda r: (r["temperature"], r["category"], r["batch_size"], _k_order(r["k"]), -(r[best] or 0.0)))
  table = [[r["category"], r["temperature"], r["batch_size"], r["k"], r["method"], r.get("acceptance_rate"),
            r["tokens_per_round"], r.get("cost_ratio_c"), r["speedup_vs_ar"]] + ([r[best]] if paired else [])
           for r in rows]
  return ["## Drafters compared (best first within each category, batch size and K)", "",
          markdown_table(["category", "T", "B", "K", "method", "acceptance", "tok/round", "cost ratio c", "speedup"]
                         + (["paired"] if paired else []), table), ""]


def trees_section(ours, tree_costs: list) -> list[str]:
  """Each token-tree cell beside its drafter's chains in the same category, batch size and temperature: tokens per
  round (and against the chain at K=4, or the largest K below it), per-depth acceptance, nodes verified per accepted
  token and the speedups; then the paired cost of verifying N tree nodes."""
  trees = [r for r in ours if r.get("tree")]
  if not trees and not tree_costs:
    return []
  parts = ["## Token trees beside chains", ""]
  if trees:
    def chain(r):
      chains = {c["k"]: c for c in ours if (c["method"], c["category"], c["batch_size"], c["temperature"])
                == (r["method"], r["category"], r["batch_size"], r["temperature"]) and not isinstance(c["k"], str)}
      below = [k for k in chains if k <= 4]
      return chains[max(below)] if below else None
    rows = []
    for r in sorted(trees, key=lambda r: (r["temperature"], r["category"], r["method"], r["tree"]["nodes"])):
      base = chain(r)
      per_depth = "/".join(fmt(a) for a in r["acceptance_per_depth"] or [])
      rows.append([r["category"], r["temperature"], r["batch_size"], r["method"],
                   f"{r['tree']['nodes']} ({tree_kind(r)}, {r['tree']['depth']} deep, {r['tree']['branching']})",
                   r["tokens_per_round"], base and f"K={base['k']}: {fmt(base['tokens_per_round'])}",
                   base and base["tokens_per_round"] and r["tokens_per_round"] / base["tokens_per_round"],
                   per_depth, r.get("verified_per_accepted"), r["speedup_vs_ar"], r.get("paired_speedup_vs_ar")])
    parts += ["Trees (nodes; dynamic, EAGLE-2, static, or tuned: the static tree of the most expected tokens at the "
              "acceptance per depth and rank measured on calibration prompts, or fastest: the tree or chain of the "
              "most expected tokens per measured round cost; depth; branching). tok/round against "
              "the same drafter's chain; acceptance per depth: P(depth d accepted | depth d - 1 was).", "",
              markdown_table(["category", "T", "B", "method", "tree", "tok/round", "chain", "tree / chain",
                              "acceptance per depth", "nodes / accepted", "speedup", "paired"], rows), ""]
  if tree_costs:
    rows = [[p["batch_size"], p["k"], p["filled"], p["step_ms"], p["verify_ms"], p["ratio"]] for p in tree_costs]
    parts += ["Verifying N tree nodes (a balanced tree: root + N positions with the tree's attention) against a "
              "one-position step, alternated from the same cache fill; medians.", "",
              markdown_table(["B", "N", "filled", "step ms", "verify ms", "ratio"], rows), ""]
  return parts


def placement_section(ours) -> list[str]:
  """Paired speedups per host placement of the CPUs (`benchmark.placement`), when the run saw more than one: on a
  VM that moves its vCPUs between one die and two, the autoregressive step and every speedup move with it."""
  rows = [[r["method"], r["category"], r["batch_size"], r["k"], where, p["pairs"], p["ar_ms_per_token"], p["speedup"]]
          for r in ours for where, p in (r.get("paired_by_placement") or {}).items()]
  if len({row[4] for row in rows}) < 2:
    return []
  return ["## Paired speedups by where the host placed the CPUs (near: one die, far: two; `benchmark.placement`)", "",
          markdown_table(["method", "category", "B", "K", "placement", "pairs", "AR ms/token", "speedup"], rows), ""]


def verify_cost_section(pairs: list) -> list[str]:
  """The paired verification cost (`specjax.benchmark.verify_cost`), when the run measured it."""
  if not pairs:
    return []
  rows = [[p["category"], p["batch_size"], p["k"], p["filled"], p["step_ms"], p["verify_ms"], p["ratio"]]
          for p in pairs]
  return ["## Verification cost: one target call over K+1 positions / a one-position step (paired)", "",
          "The two calls alternate from the same cache fill (prompt mean + max_new_tokens / 2); medians, ratio = "
          "median of the per-pair ratios.", "",
          markdown_table(["category", "B", "K", "filled", "step ms", "verify ms", "ratio"], rows), ""]


def code_execution_note(settings: dict) -> list[str]:
  """Where generated code ran, when the run executed it against the prompts' tests."""
  if not settings.get("execute_code"):
    return []
  return [f"Code outputs were executed in the sandbox (specjax.benchmark.sandbox): {sandbox.describe()}.", ""]


def write_report(records, settings: dict, output_dir: str) -> str:
  ours = _ours(records)
  temps = sorted({r["temperature"] for r in ours})
  batches = sorted({r["batch_size"] for r in ours})
  first = records[0] if records else {}
  per_category = settings.get("prompts_per_category")
  parts = ["# specjax benchmark", "",
           f"Machine: {first.get('machine')}; jax {first.get('jax_version')}; devices {first.get('devices')}.",
           f"Model: {settings.get('model')}; max_new_tokens {settings.get('max_new_tokens')}; "
           f"prompts per category {'all' if per_category == 0 else per_category}; chat {settings.get('chat')}.",
           "Speedups are throughput ratios against specjax autoregressive decoding of the same batch size, category and "
           "temperature, measured in this run (fused loop, end to end, prefill included; compilation excluded).", ""]
  for temp in temps:
    for method in _spec_methods(records):
      paired = speedup_key([r for r in ours if r["method"] == method]) != "speedup_vs_ar"
      how = ", median of paired calls" if paired else ""
      parts += [f"## {method}: speedup by category x K (batch {batches[0]}, temperature {temp:g}{how})", "",
                speedup_by_category_table(records, method, batches[0], temp), "",
                f"## {method}: speedup by batch size x K (geometric mean over categories, temperature {temp:g}{how})",
                "",
                speedup_by_batch_table(records, method, temp), ""]
  parts += drafters_section(ours) + adaptive_section(ours) + stops_paying_section(ours) + placement_section(ours)
  parts += reference_section(ours)
  ar_rows = [r for r in ours if r["method"] == "ar" and r.get("bandwidth_bound_tok_s")]
  if ar_rows:
    parts += ["## Autoregressive decoding against the memory-bandwidth bound", "",
              f"Copy bandwidth measured in this run: {first.get('copy_bandwidth_gbs', 0):.1f} GB/s (read + write). "
              "Bound: batch x bandwidth / (parameter bytes + batch x filled KV-cache bytes) per step; measured "
              "throughput includes prefill, so the fraction is a lower bound.", ""]
    rows = [[r["batch_size"], r["category"], r["temperature"], r["throughput_tok_s"], r["bandwidth_bound_tok_s"],
             r["fraction_of_bandwidth_bound"]] for r in ar_rows]
    parts += [markdown_table(["B", "category", "T", "tok/s", "bound tok/s", "fraction"], rows), ""]
  parts += verify_cost_section(first.get("paired_verify_cost") or [])
  parts += trees_section(ours, first.get("paired_tree_verify_cost") or [])
  parts += ["## Theory beside measurement", "",
            "alpha: per-position acceptance estimate; E: (1-alpha^(K+1))/(1-alpha); c: draft step / AR step; "
            "r: verify+accept round / AR step (phase-split); predicted = E / (K c + r) (Leviathan et al. 2023 "
            "Thm 3.8, whose own value E / (K c + 1) is `thm 3.8`).", ""]
  rows = [[r["method"], r["k"], r["batch_size"], r["category"], r["temperature"], r.get("alpha"),
           r["tokens_per_round"], r.get("expected_tokens_per_round"), r.get("cost_ratio_c"),
           r.get("verify_cost_ratio"), r.get("predicted_speedup_theorem"), r["predicted_speedup"],
           r["speedup_vs_ar"]] for r in ours if r["method"] != "ar"]
  parts += [markdown_table(["method", "K", "B", "category", "T", "alpha", "tok/round", "E", "c", "r", "thm 3.8",
                            "predicted", "measured"], rows), ""]
  gaps = [r for r in ours if r.get("theory_gap")]
  if gaps:
    parts += ["Where measured and predicted disagree by more than 15%, or cannot be compared:", ""]
    parts += [f"- {r['method']} K={r['k']} B={r['batch_size']} {r['category']} T={r['temperature']:g}: "
              f"{r['theory_gap']}" for r in gaps]
    parts.append("")
  parts += ["## Round phases (phase-split mode, ms per round)", ""]
  rows = [[r["method"], r["k"], r["batch_size"], r["category"], r["temperature"], r["draft_ms_per_round"],
           r["verify_ms_per_round"], r["accept_ms_per_round"], r.get("phase_split_matches_fused")]
          for r in ours if r["verify_ms_per_round"] is not None]
  parts += [markdown_table(["method", "K", "B", "category", "T", "draft", "verify", "accept",
                            "same tokens as fused"], rows), ""]
  parts += ["## Quality per category", "",
            "code: functions that parse and pass the prompt's tests; structured: outputs that parse as JSON/CSV; "
            "prose: distinct-bigram ratio; long_context: share of output trigrams found in the passage. "
            "Greedy runs: share of rows whose tokens equal autoregressive decoding's. Sampled runs: whether the "
            "method's quality agrees with autoregressive decoding's within a 95% interval.", ""]
  parts += code_execution_note(settings)
  rows = [[r["method"], r["k"], r["batch_size"], r["category"], r["temperature"], r["quality"]["metric"],
           r["quality"]["value"], r["quality"]["n"], r.get("greedy_match_ar"), r["quality"].get("agrees_with_ar")]
          for r in records if r.get("quality")]
  parts += [markdown_table(["method", "K", "B", "category", "T", "metric", "value", "n", "greedy = AR",
                            "agrees with AR"], rows), ""]
  peers = [r for r in records if r.get("implementation") == "hf"]
  if peers:
    parts += ["## Peer: HF transformers generate on the same file and prompts (batch 1)", "",
              "speedup vs own AR: the peer's prompt lookup against the peer's autoregressive generate; "
              "vs specjax AR: against specjax autoregressive decoding in this run.", ""]
    rows = [[r["method"], r["k"], r["category"], r["temperature"], r["throughput_tok_s"], r.get("speedup_vs_own_ar"),
             r["speedup_vs_ar"], r["quality"]["value"]] for r in peers]
    parts += [markdown_table(["method", "K", "category", "T", "tok/s", "speedup vs own AR", "vs specjax AR",
                              "quality"], rows), ""]
  peers = [r for r in records if r.get("implementation") == "llama_cpp"]
  if peers:
    parts += ["## Peer: llama.cpp on the same GGUF pair and prompts (batch 1)", "",
              f"Its target ({peers[0].get('llama_cpp_target', 'F32')}) alone (llama-completion) and with the file's "
              "own quantized blocks as the draft "
              "(llama-speculative, K drafts); vs own AR: against its own autoregressive run; specjax / llama.cpp: "
              "specjax's autoregressive cell (K=0) or its fastest quantized self-draft at that K, over llama.cpp's, "
              "both as decode rates (tokens after the first over the time after the first token: llama.cpp's own "
              "timings leave its prompt out); the tok/s columns include specjax's prefill.",
              ""]
    rows = [[r["method"], r["k"], r["category"], r["temperature"], r["throughput_tok_s"], r["acceptance_rate"],
             r.get("speedup_vs_own_ar"), r["speedup_vs_ar"], r.get("specjax_over_peer")] for r in peers]
    parts += [markdown_table(["method", "K", "category", "T", "tok/s", "acceptance", "vs own AR", "vs specjax AR",
                              "specjax / llama.cpp"], rows), ""]
  parts += ["## All results", ""]
  rows = [[r["method"], r["k"], r["batch_size"], r["category"], r["temperature"], r["throughput_tok_s"],
           r["latency_ms_per_token_p50"], r["latency_ms_per_token_p90"], r["tokens_per_round"], r["acceptance_rate"],
           r["speedup_vs_ar"], r.get("compile_s")] for r in records]
  parts += [markdown_table(["method", "K", "B", "category", "T", "tok/s", "ms/tok p50", "ms/tok p90", "tok/round",
                            "accept", "speedup", "compile s"], rows), ""]
  plots = write_plots(records, output_dir)
  parts += ["## Plots", ""] + [f"![{name}]({name})" for name in plots] + [""]
  text = "\n".join(parts)
  with open(os.path.join(output_dir, "report.md"), "w") as f:
    f.write(text)
  return text


def write_plots(records, output_dir: str) -> list[str]:
  """speedup_vs_k.png (per category, one line per method), throughput_vs_batch.png, latency_vs_batch.png."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  ours = _ours(records)
  temp = min(r["temperature"] for r in ours)
  batch = min(r["batch_size"] for r in ours)
  methods = _spec_methods(records)
  cats = list(dict.fromkeys(r["category"] for r in ours))
  names = []

  fig, axes = plt.subplots(1, len(cats), figsize=(4 * len(cats), 3.2), squeeze=False)
  for ax, cat in zip(axes[0], cats):
    for method in methods:
      rows = sorted((r["k"], r["speedup_vs_ar"]) for r in ours if r["method"] == method and r["category"] == cat
                    and r["batch_size"] == batch and r["temperature"] == temp and not isinstance(r["k"], str))
      if rows:
        ax.plot(*zip(*rows), marker="o", label=method)
    ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    ax.set(title=cat, xlabel="K", ylabel="speedup vs AR")
  axes[0][0].legend(fontsize=8)
  fig.suptitle(f"speedup vs K (batch {batch}, temperature {temp:g})")
  fig.tight_layout()
  fig.savefig(os.path.join(output_dir, "speedup_vs_k.png"), dpi=100)
  plt.close(fig)
  names.append("speedup_vs_k.png")

  for key, label, name in (("throughput_tok_s", "tokens / s", "throughput_vs_batch.png"),
                           ("latency_ms_per_token_p50", "ms / token (p50)", "latency_vs_batch.png")):
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for method in ["ar"] + methods:
      for k in sorted({r["k"] for r in ours if r["method"] == method}, key=_k_order):
        points = {}
        for r in ours:
          if r["method"] == method and r["k"] == k and r["temperature"] == temp and r[key] is not None:
            points.setdefault(r["batch_size"], []).append(r[key])
        if points:
          xs = sorted(points)
          ax.plot(xs, [np.mean(points[x]) for x in xs], marker="o", label=method if method == "ar" else f"{method} K={k}")
    ax.set(xlabel="batch size", ylabel=label, title=f"{label} vs batch size (mean over categories, T={temp:g})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(output_dir, name), dpi=100)
    plt.close(fig)
    names.append(name)
  return names


def _jsonable(value):
  if isinstance(value, dict):
    return {k: _jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_jsonable(v) for v in value]
  if isinstance(value, np.generic):
    return value.item()
  return value


def write_outputs(records, settings: dict, output_dir: str) -> None:
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, "results.json"), "w") as f:
    json.dump(_jsonable(records), f, indent=1)
  write_report(records, settings, output_dir)
