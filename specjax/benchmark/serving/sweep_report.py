"""The serving sweep's report.md and plots from its results (sweep.run_sweep's dict, or results.json read back): per
concurrency (and request rate) a table of the systems, where each speculative system stops paying (the lowest
concurrency at which its output throughput falls below its baseline's at the same concurrency), and TTFT, TPOT,
goodput and throughput against concurrency and against achieved output throughput, one line per system."""

import os

from specjax.benchmark.tables import fmt, markdown_table
from specjax.benchmark.serving import sweep_targets
from specjax.benchmark.serving.sweep_cells import keys, measured, paired_ratios, ratios

PLOT_METRICS = {"ttft": ("median_ttft_ms", "median TTFT (ms)"), "tpot": ("median_tpot_ms", "median TPOT (ms)"),
                "goodput": ("request_goodput", "goodput (req/s)"),
                "throughput": ("output_throughput", "output tokens / s")}


def stops_paying(results: dict, system: str, baseline: str) -> int | None:
  """The lowest concurrency at which system's output throughput is below baseline's (None: never, or unmeasured)."""
  return next((c for c, ratio in sorted(ratios(results, system, baseline).items()) if ratio < 1.0), None)


def speculative_pairs(results: dict) -> list[tuple[str, str]]:
  """(speculative system, a baseline it is measured against), in the sweep's order."""
  return [(name, base) for name, info in results["systems"].items() if info.get("speculative")
          for base in info.get("baselines") or ()]


def stops_paying_section(results: dict) -> list[str]:
  rows = []
  for system, base in speculative_pairs(results):
    found = ratios(results, system, base)
    stop = stops_paying(results, system, base)
    verdict = ("not measured" if not found else f"{stop}" if stop is not None else
               f"pays at every concurrency ({min(found)}-{max(found)})")
    spread = paired_ratios(results, system, base)
    rows.append([system, base, verdict, " ".join(
        f"c{c}:{r:.2f}" + (f" ({min(spread[c]):.2f}-{max(spread[c]):.2f})" if len(spread[c]) > 1 else "")
        for c, r in sorted(found.items())) or "-"])
  if not rows:
    return []
  return ["## Where speculation stops paying", "",
          "The lowest concurrency at which the system's output throughput is below its baseline's at the same "
          "concurrency; with repeats, the median of the ratios paired by repeat (their range in brackets).", "",
          markdown_table(["system", "against", "stops paying at concurrency", "throughput ratio"], rows),
          ""]


def cell_table(results: dict, key, kind: str = "concurrency") -> str:
  """One row per system measured at this concurrency (or rate)."""
  cells = measured(results, kind)
  base = (results["config"].get("baseline") or "")
  rows = []
  for name in results["systems"]:
    r = cells.get((name, key))
    if r is None:
      continue
    ratio = ratios(results, name, base, kind).get(key) if base else None
    accept = None if r.get("acceptance_rate") is None else 100.0 * r["acceptance_rate"]
    rows.append([name, f"{r['completed']}/{r['failed']}", r["output_throughput"], ratio, r["median_ttft_ms"],
                 r["median_tpot_ms"], r.get("p99_tpot_ms"), r.get("request_goodput"), accept])
  return markdown_table(["system", "done/failed", "output tok/s", f"vs {base or '-'}", "median TTFT ms",
                         "median TPOT ms", "p99 TPOT ms", "goodput req/s", "accept %"], rows)


def _tables(results: dict) -> list[str]:
  lines = []
  count = {(c.get("concurrency"), None if c.get("concurrency") else float(c["request_rate"])): c["num_prompts"]
           for c in results["cells"]}
  for key in keys(results, "concurrency"):
    lines += [f"## Concurrency {key} ({count[key, None]} requests, all sent at once)", "", cell_table(results, key),
              ""]
  for key in keys(results, "rate"):
    n = count[None, key]
    lines += [f"## {key:g} requests / s ({n} requests, Poisson arrivals, no concurrency limit)", "",
              cell_table(results, key, "rate"), ""]
  return lines


def _failure(what: str, error: str, tail_lines: int = 8) -> list[str]:
  """A list item: the error's first line, and the last lines of the rest (a server log's tail) as a code block."""
  first, *rest = error.strip().splitlines() or [""]
  rest = [line for line in rest if line.strip()][-tail_lines:]
  return [f"- {what}: {first}"] + (["", "  ```", *[f"  {line}" for line in rest], "  ```"] if rest else [])


def failures_section(results: dict) -> list[str]:
  """Systems that failed, cells that failed, and cells with failed requests (their first distinct error)."""
  lines = [line for name, info in results["systems"].items() if info.get("error")
           for line in _failure(name, info["error"])]
  for cell in results["cells"]:
    where = f"concurrency {cell['concurrency']}" if cell.get("concurrency") else f"{cell['request_rate']} req/s"
    if cell.get("error"):
      lines += _failure(f"{cell['system']} at {where}", cell["error"])
    elif cell.get("result") and cell["result"].get("failed"):
      errors = [e for e in dict.fromkeys(cell["result"].get("errors") or ()) if e]
      lines.append(f"- {cell['system']} at {where}: {cell['result']['failed']} requests failed"
                   f"{f' ({errors[0]})' if errors else ''}")
  return ["## Failures", "", *lines, ""] if lines else []


def _schedule(c: dict) -> str:
  repeats = c.get("repeats", 1)
  each = f"; each number the median of {repeats} repeats" if repeats > 1 else ""
  if c.get("interleave"):
    return (f"Interleaved: every server up at once, each cell run by all systems back to back in a rotated order"
            f"{each}, each ratio the median of ratios paired by repeat.")
  return f"One system after another: each server alone, all its cells, stopped before the next started{each}."


def _header(results: dict) -> list[str]:
  c, m = results["config"], results["machine"]
  slos = ", ".join(c.get("goodput") or ()) or "none"
  lines = ["# Serving sweep", "",
           f"{results['date']}; {m['platform']}, {m['cpu_count']} CPUs. Categories {', '.join(c['categories'])}; "
           f"output length {c['output_len'] or 'each category own'}; temperature {c['temperature']:g}; goodput "
           f"SLOs {slos}; serve config {c['serve_config']}.", "", _schedule(c), "", "Systems:", ""]
  for name, info in results["systems"].items():
    rss = f", {info['rss_gib']:.1f} GiB resident after warmup" if info.get("rss_gib") else ""
    rss += "; deferred for memory: ran alone after the interleaved ones, unpaired" if info.get("deferred") else ""
    state = f"failed: {info['error'].splitlines()[0]}" if info.get("error") else (
        f"up in {fmt(info.get('startup_s'), '.0f')} s{rss}")
    lines.append(f"- **{name}** ({info['kind']}; {state}): `{' '.join(info.get('command') or ['-'])}`")
  return lines + [""]


def write_report(results: dict, output_dir: str, plots=()) -> str:
  """report.md in output_dir; returns its text."""
  lines = _header(results) + sweep_targets.targets_section(results) + stops_paying_section(results) + _tables(results)
  if plots:
    lines += ["## Plots", "", *[f"![{name}]({name})" for name in plots], ""]
  lines += failures_section(results)
  text = "\n".join(lines)
  with open(os.path.join(output_dir, "report.md"), "w") as f:
    f.write(text)
  return text


def _axes(plt, xlabel: str, ylabel: str, title: str):
  fig, ax = plt.subplots(figsize=(6, 4))
  ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
  return fig, ax


def _save(fig, ax, plt, output_dir: str, name: str) -> str:
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(os.path.join(output_dir, name), dpi=100)
  plt.close(fig)
  return name


def write_plots(results: dict, output_dir: str) -> list[str]:
  """{ttft,tpot,goodput,throughput}_vs_concurrency.png, {ttft,tpot,goodput}_vs_throughput.png (rate cells as
  crosses) and speedup_vs_concurrency.png; a metric nothing measured (goodput without SLOs) is skipped."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  os.makedirs(output_dir, exist_ok=True)
  by_c, by_rate = measured(results), measured(results, "rate")
  systems = [name for name in results["systems"] if any(s == name for s, _ in list(by_c) + list(by_rate))]
  names = []
  for short, (key, label) in PLOT_METRICS.items():
    if not any(r.get(key) is not None for r in list(by_c.values()) + list(by_rate.values())):
      continue
    fig, ax = _axes(plt, "concurrency", label, f"{label} vs concurrency")
    ax.set_xscale("log", base=2)
    for name in systems:
      points = sorted((c, r[key]) for (s, c), r in by_c.items() if s == name and r.get(key) is not None)
      if points:
        ax.plot(*zip(*points), marker="o", label=name)
    names.append(_save(fig, ax, plt, output_dir, f"{short}_vs_concurrency.png"))
    if short == "throughput":
      continue
    fig, ax = _axes(plt, "achieved output tokens / s", label, f"{label} vs achieved throughput")
    for i, name in enumerate(systems):
      color = f"C{i % 10}"
      points = sorted((c, r["output_throughput"], r[key]) for (s, c), r in by_c.items()
                      if s == name and r.get(key) is not None)   # joined in order of concurrency, each labelled
      if points:
        ax.plot([p[1] for p in points], [p[2] for p in points], marker="o", color=color, label=name)
        for c, x, y in points:
          ax.annotate(f"c{c}", (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
      rated = [(r["output_throughput"], r[key]) for (s, _), r in by_rate.items()
               if s == name and r.get(key) is not None]
      if rated:
        ax.plot(*zip(*rated), ls="", marker="x", color=color, label=f"{name} (rate cells)")
    names.append(_save(fig, ax, plt, output_dir, f"{short}_vs_throughput.png"))
  pairs = speculative_pairs(results)
  if any(ratios(results, s, b) for s, b in pairs):
    fig, ax = _axes(plt, "concurrency", "output throughput / baseline's", "speculation's gain vs concurrency")
    ax.set_xscale("log", base=2)
    ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    for system, base in pairs:
      points = sorted(ratios(results, system, base).items())
      if points:
        ax.plot(*zip(*points), marker="o", label=f"{system} / {base}")
    names.append(_save(fig, ax, plt, output_dir, "speedup_vs_concurrency.png"))
  return names


def write_outputs(results: dict, output_dir: str) -> str:
  """The plots, then report.md (which links them); returns the report's path."""
  os.makedirs(output_dir, exist_ok=True)
  write_report(results, output_dir, write_plots(results, output_dir))
  return os.path.join(output_dir, "report.md")

