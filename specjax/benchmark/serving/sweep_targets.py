"""The serving targets checked on a sweep's results, each from ratios paired by repeat: speculative TPOT at
concurrency 1 against autoregressive's, the adaptive policy's throughput against the better of autoregressive and
the best fixed K and its p99 TPOT against autoregressive's, and specjax against llama-server with and without
speculation. A target whose systems were not all measured in one sweep is not listed."""

import statistics

from specjax.benchmark.tables import markdown_table
from specjax.benchmark.serving import sweep_config
from specjax.benchmark.serving.sweep_cells import keys, measured, paired_ratios

C1_TPOT = 1 / 1.5          # speculative median TPOT at concurrency 1, at most this fraction of autoregressive's
ADAPTIVE_THROUGHPUT = 0.95   # the adaptive policy's output throughput, at least this fraction of the better system's
ADAPTIVE_P99_TPOT = 1.05     # its p99 TPOT, at most this multiple of autoregressive's


def roles(results: dict) -> dict:
  """{role: [systems]}: autoregressive and fixed (specjax without and with a fixed-K drafter), adaptive, peer and
  peer_draft (llama-server without and with its draft), in the sweep's order. A results.json from before systems
  recorded `adaptive` is read by the sweep's config."""
  out = {"autoregressive": [], "fixed": [], "adaptive": [], "peer": [], "peer_draft": []}
  for name, info in results["systems"].items():
    if info["kind"] != "specjax":
      out["peer_draft" if info.get("speculative") else "peer"].append(name)
    elif not info.get("speculative"):
      out["autoregressive"].append(name)
    else:
      adaptive = info.get("adaptive", sweep_config.adapts(results["config"], name))
      out["adaptive" if adaptive else "fixed"].append(name)
  return out


def _best(results: dict, systems: list[str], c: int) -> str | None:
  """The system with the highest median output throughput at concurrency c (None: none measured)."""
  cells = measured(results)
  found = {s: cells[s, c]["output_throughput"] for s in systems if (s, c) in cells}
  return max(found, key=found.get) if found else None


def _row(target: str, c: int, system: str, other: str, ratios: list[float], met) -> list:
  if not ratios:
    return []
  median = statistics.median(ratios)
  return [target, c, f"{system} / {other}", " ".join(f"{r:.2f}" for r in ratios), median,
          "yes" if met(median) else "**no**"]


def target_rows(results: dict) -> list[list]:
  """[target, concurrency, ratio of, paired ratios, their median, met] for every target the sweep measured."""
  role = roles(results)

  def paired(system, other, c, metric="output_throughput"):
    return paired_ratios(results, system, other, metric=metric).get(c, [])

  rows = []
  for c in keys(results, "concurrency"):
    for ar in role["autoregressive"][:1]:
      if c == 1:
        tpot = {s: paired(s, ar, c, "median_tpot_ms") for s in role["fixed"] + role["adaptive"]}
        tpot = {s: ratios for s, ratios in tpot.items() if ratios}
        best = min(tpot, default=None, key=lambda s: statistics.median(tpot[s]))
        if best:
          rows.append(_row(f"median TPOT <= {C1_TPOT:.3f}x", c, best, ar, tpot[best], lambda m: m <= C1_TPOT))
      better = _best(results, [ar] + role["fixed"], c)
      for adaptive in role["adaptive"]:
        rows.append(_row(f"throughput >= {ADAPTIVE_THROUGHPUT}x the better", c, adaptive, better,
                         paired(adaptive, better, c), lambda m: m >= ADAPTIVE_THROUGHPUT))
        rows.append(_row(f"p99 TPOT <= {ADAPTIVE_P99_TPOT}x", c, adaptive, ar, paired(adaptive, ar, c, "p99_tpot_ms"),
                         lambda m: m <= ADAPTIVE_P99_TPOT))
      for peer in role["peer"][:1]:
        rows.append(_row("throughput >= 1.0x", c, ar, peer, paired(ar, peer, c), lambda m: m >= 1.0))
    ours = _best(results, role["fixed"] + role["adaptive"], c)
    for peer in (role["peer"] + role["peer_draft"]) if ours else ():
      rows.append(_row("speculative throughput > 1.0x", c, ours, peer, paired(ours, peer, c), lambda m: m > 1.0))
  return [row for row in rows if row]


def targets_section(results: dict) -> list[str]:
  rows = target_rows(results)
  if not rows:
    return []
  return ["## Targets", "",
          "Each ratio paired by repeat (the two systems' cells ran back to back), the median of them judged. \"The "
          "better\" is whichever of autoregressive and the fixed-K systems has the highest median throughput at that "
          "concurrency; the speculative system against llama-server is specjax's best speculative one there.", "",
          markdown_table(["target", "concurrency", "ratio", "paired ratios", "median", "met"], rows), ""]
