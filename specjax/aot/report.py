"""aot.json (everything `run_aot` returns) and aot.md (the tables a person reads) in an output directory."""

import json
import os

from specjax.benchmark.tables import markdown_table

GB = 1e9


def _cell(v) -> str:
  """An AOT cell: three significant digits below 100, "NO" for a failed check."""
  if v is None:
    return "-"
  if isinstance(v, bool):
    return "yes" if v else "NO"
  if isinstance(v, float):
    return f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"
  return str(v)


def _table(header: list[str], rows: list[list]) -> str:
  return markdown_table(header, rows, cell=_cell)


def format_bytes(n: float) -> str:
  """Bytes with a decimal unit: 9.13 GB, 249 kB."""
  for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
    if abs(n) >= scale:
      return f"{n / scale:.3g} {unit}"
  return f"{n:.0f} B"


def _comm(figures: dict) -> str:
  parts = [f"{c['count']:.0f} {kind} ({format_bytes(c['result_bytes'])})" for kind, c in figures["collectives"].items()]
  return ", ".join(parts) or "none"


def programs_table(result: dict) -> str:
  size = format_bytes
  rows = [[f["name"], f["role"], f["positions"], size(f["argument_bytes"]), size(f["weight_bytes"]),
           size(f["temp_bytes"]), size(f["output_bytes"]), f["fits_hbm"], f["flops"] / 1e9, f["model_flops"] / 1e9,
           size(f["xla_bytes_accessed"]), size(f["roofline_bytes"]), f["compute_ms"], f["memory_ms"], f["comm_ms"],
           f["roofline_ms"], _comm(f)]
          for f in result["programs"].values()]
  return _table(["program", "model", "positions", "arguments", "of which weights", "temp", "output", "fits HBM",
                 "GFLOP (XLA)", "GFLOP (model)", "XLA bytes accessed", "roofline bytes", "compute ms", "memory ms",
                 "comm ms", "roofline ms", "collectives (per device)"], rows)


def prediction_table(result: dict) -> str:
  rows = [[k, result["verify_by_k"][k]["roofline_ms"], result["verify_by_k"][k]["interpolated"],
           result["predicted_ms_per_token_spec"][k], result["predicted_speedup"][k]]
          for k in result["predicted_ms_per_token_spec"]]
  return _table(["K", "verify K+1 ms", "interpolated", "spec ms/token", "speedup"], rows)


def tree_cost_table(trees: dict) -> str:
  rows = [[r["n"], r["verify_ms"], r["chain_verify_ms"], "interpolated" if r["chain_interpolated"] else "compiled",
           r["ar_ms"], r["verify_ratio"], r["chain_verify_ratio"]] for r in trees["rows"]]
  return _table(["N", "tree verify ms", "chain verify K=N ms", "chain K=N", "step ms", "tree / step", "chain / step"],
                rows)


def tree_speedup_table(trees: dict) -> str:
  rows = []
  for r in trees["rows"]:
    for rate, entry in r["by_sibling_rate"].items():
      best, balanced = entry["best"], entry["balanced"]
      rows.append([r["n"], float(rate), best["depth"], "+".join(map(str, best["draft_calls"])),
                   best["expected_tokens"], best["speedup"], balanced["expected_tokens"], balanced["speedup"],
                   r["best_chain_k"], r["best_chain_speedup"], entry["vs_best_chain"]])
  return _table(["N", "sibling rate", "best tree depth", "draft call widths", "tokens/round", "speedup",
                 "balanced tree tokens/round", "balanced speedup", "best chain K <= N", "chain speedup",
                 "tree / chain"], rows)


def paper_table(comparison: dict) -> str:
  rows = [["autoregressive", comparison["paper_ar_ms_per_token"], 1.0, None, None,
           comparison["roofline_ar_ms_per_token"], 1.0]]
  rows += [[r["task"], r["paper_ms_per_token"], r["paper_speedup"], r["alpha_implied_paper_costs"],
            r["alpha_implied_roofline_costs"], r["roofline_ms_per_token"], r["roofline_speedup"]]
           for r in comparison["rows"]]
  return _table(["paper row", "paper ms/token", "paper speedup", "alpha implied (paper costs)",
                 "alpha implied (roofline costs)", "roofline ms/token at the first alpha", "roofline speedup"], rows)


def measured_table(rows: list[dict]) -> str:
  return _table(["method", "K", "B", "category", "T", "alpha", "predicted", "measured", "error", "within"],
                [[r["method"], r["k"], r["batch_size"], r["category"], r["temperature"], r["alpha"],
                  r["predicted_speedup"], r["measured_speedup"], f"{r['relative_error']:+.0%}", r["within_tolerance"]]
                 for r in rows])


def markdown(result: dict) -> str:
  chip, mesh = result["chip"], result["mesh"]
  parts = [
      f"# AOT compile: {result['topology']} ({result['n_devices']} x {chip['name']}, {result['n_hosts']} host(s)), "
      f"mesh data={mesh['data']} x model={mesh['model']}",
      f"Target {result['target_params'] / 1e9:.2f}B parameters, draft {result['draft_params'] / 1e9:.2f}B, "
      f"{result['target']['dtype']}; batch {result['batch_size']}, K={result['k']}, cache {result['cache_len']} "
      f"positions, costed at a context of {result['context_len']}.",
      f"Chip figures: {chip['peak_flops'] / 1e12:.0f} TFLOP/s bf16, HBM {chip['hbm_bytes'] / GB:.1f} GB at "
      f"{chip['hbm_bandwidth'] / 1e9:.0f} GB/s, all-reduce {chip['collective_bandwidth'] / 1e9:.0f} GB/s per chip. "
      f"Source: {chip['source']}.",
      "## Programs (per device)",
      programs_table(result),
      "Roofline ms = max(FLOPs / peak, roofline bytes / HBM bandwidth) + collective bytes / all-reduce bandwidth. "
      "Roofline bytes = the device's weight shards + its KV cache up to the context + other inputs and outputs; XLA's "
      "own `bytes accessed` is shown beside it (it counts every in-place cache update as a whole-buffer write).",
      f"Resident on each device (both models, caches, largest temporaries): "
      f"{format_bytes(result['resident_bytes_per_device'])} of {format_bytes(result['hbm_bytes_per_device'])}: "
      f"fits_hbm = {result['fits_hbm']}.",
      f"## Prediction at acceptance rate {result['acceptance_rate']}",
      f"Autoregressive: {result['predicted_ms_per_token_ar']:.3f} ms/token.",
      prediction_table(result),
  ]
  if "trees" in result:
    trees = result["trees"]
    parts += [f"## Token trees (branching {trees['branching']!r}, rank-0 children accepted at alpha "
              f"{trees['alpha']})",
              "Tree verify: the target over the root + N nodes of `StaticTree.balanced(N)` with the tree's attention, "
              "exact tree acceptance and the accepted path compacted; the chain verify at K = N scores the same "
              "N + 1 positions.",
              tree_cost_table(trees),
              "Speedup over the autoregressive step: the likeliest static tree of N nodes at the depth that pays best "
              "(expected tokens per round = 1 + the sum over nodes of the probability that the node's path is "
              "accepted; rank 0 at alpha, a lower rank at the sibling rate once the higher-ranked siblings were "
              "rejected), one draft call per level above the leaves; beside the best chain of K <= N drafts.",
              tree_speedup_table(trees)]
  if "paper_comparison" in result:
    comparison = result["paper_comparison"]
    parts += [f"## Against the paper (K={comparison['k']}): {comparison.get('source', '')}", paper_table(comparison)]
    parts += ["- " + line for line in comparison["explanation"]]
  if "measured_comparison" in result:
    measured = result["measured_comparison"]
    summary = measured["summary"]
    parts += ["## The same model against a measured CPU benchmark",
              f"{summary['n_within']} of {summary['n']} speculative records within {summary['tolerance']:.0%} "
              f"(median error {summary['median_abs_error'] or 0:.0%}); source {measured['path']}.",
              measured_table(measured["rows"])]
  return "\n\n".join(parts) + "\n"


def write_outputs(result: dict, output_dir: str) -> tuple[str, str]:
  os.makedirs(output_dir, exist_ok=True)
  json_path, md_path = os.path.join(output_dir, "aot.json"), os.path.join(output_dir, "aot.md")
  with open(json_path, "w", encoding="utf-8") as f:
    json.dump(result, f, indent=1)
  with open(md_path, "w", encoding="utf-8") as f:
    f.write(markdown(result))
  return json_path, md_path
