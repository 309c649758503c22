"""A sweep's cells read back: each (system, concurrency or request rate)'s results by repeat, their medians, and
output-throughput ratios paired by repeat (an interleaved sweep ran a repeat's cells of all systems back to back)."""

import statistics


def by_repeat(results: dict, kind: str) -> dict:
  """{(system, concurrency or request rate): {repeat: result}} of the cells of that kind where a request completed."""
  out = {}
  for cell in results["cells"]:
    result = cell.get("result")
    if not result or not result.get("completed") or bool(cell.get("concurrency")) != (kind == "concurrency"):
      continue
    key = cell["concurrency"] if kind == "concurrency" else float(cell["request_rate"])
    out.setdefault((cell["system"], key), {})[cell.get("repeat", 0)] = result
  return out


def median_result(runs: list[dict]) -> dict:
  """One run as it is; several: each number their median (None where a run lacks it), the rest the first run's."""
  if len(runs) == 1:
    return runs[0]
  out = dict(runs[0], repeats=len(runs))
  for key, value in runs[0].items():
    if isinstance(value, (int, float)) and not isinstance(value, bool):
      values = [run.get(key) for run in runs]
      median = None if any(v is None for v in values) else statistics.median(values)
      whole = median is not None and isinstance(value, int) and float(median).is_integer()
      out[key] = int(median) if whole else median
  return out


def measured(results: dict, kind: str = "concurrency") -> dict:
  """{(system, concurrency or request rate): result} where a request completed (the median over repeats)."""
  return {key: median_result(list(runs.values())) for key, runs in by_repeat(results, kind).items()}


def keys(results: dict, kind: str) -> list:
  if kind == "concurrency":
    return sorted({c["concurrency"] for c in results["cells"] if c.get("concurrency")})
  return sorted({float(c["request_rate"]) for c in results["cells"] if not c.get("concurrency")})


def paired_ratios(results: dict, system: str, baseline: str, kind: str = "concurrency",
                  metric: str = "output_throughput") -> dict:
  """{concurrency: [system's metric / baseline's, for each repeat both measured]}: an interleaved sweep ran a
  repeat's cells of the two back to back, so each ratio is paired."""
  runs = by_repeat(results, kind)
  out = {}
  for key in keys(results, kind):
    ours, base = runs.get((system, key), {}), runs.get((baseline, key), {})
    found = [ours[r][metric] / base[r][metric] for r in sorted(ours)
             if r in base and ours[r].get(metric) is not None and base[r].get(metric)]
    if found:
      out[key] = found
  return out


def ratios(results: dict, system: str, baseline: str, kind: str = "concurrency") -> dict:
  """{concurrency: output throughput of system / baseline's} where both were measured (the paired ratios' median)."""
  return {key: float(statistics.median(found)) for key, found in paired_ratios(results, system, baseline,
                                                                                kind).items()}
