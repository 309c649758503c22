"""A reference chain cell (config.paired_reference, "METHOD@K") timed beside every other drafter cell on the same
inputs, back to back: a tree against the best chain, paired, so that the host's drift and its placement of the
CPUs (section 54) fall out of each ratio instead of deciding which cell looks faster."""

from specjax.benchmark.tables import markdown_table


def parse_reference(value: str, methods, ks) -> tuple[str, int] | None:
  """(method, K) from "METHOD@K" ("" = none): a drafter method of the run at one of its chain K."""
  if not value:
    return None
  method, at, k = str(value).rpartition("@")
  if not at or not k.isdigit():
    raise ValueError(f"config.paired_reference must be 'METHOD@K' (e.g. 'quantized:q4@4'), got {value!r}")
  if method not in tuple(methods)[1:]:
    raise ValueError(f"config.paired_reference names {method!r}, not a drafter method of config.methods "
                     f"{list(methods)}")
  if int(k) not in tuple(ks):
    raise ValueError(f"config.paired_reference's K={k} is not in config.ks {list(ks)}, so its own cell is not run")
  return method, int(k)


def is_reference(cell, reference) -> bool:
  return reference is not None and (cell.method, cell.k) == reference and cell.tree is None


def reference_section(ours) -> list[str]:
  """Each cell's speedup over the reference chain, median of back-to-back pairs, overall and per placement."""
  rows, reference = [], None
  for r in ours:
    p = r.get("paired_vs_reference")
    if p:
      reference = r["paired_reference"]
      by = p["by_placement"]
      rows.append([r["method"], r["category"], r["batch_size"], r["k"], p["pairs"], p["speedup"],
                   *((by.get(where) or {}).get("speedup") for where in ("near", "far")),
                   r.get("paired_speedup_vs_ar")])
  if not rows:
    return []
  method, k = reference
  return [f"## Paired against {method} K={k} (its call beside every call, same inputs; > 1: faster than it)", "",
          markdown_table(["method", "category", "B", "K", "pairs", f"x {method} K={k}", "near", "far", "x AR"], rows),
          ""]
