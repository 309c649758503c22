"""Markdown tables for the reports (benchmark, serving sweep, AOT analysis): one layout, each report its own cells."""

import numpy as np


def fmt(value, spec=".2f") -> str:
  """A benchmark cell: "-" for None, yes/no, integers whole, other numbers by `spec`."""
  if value is None:
    return "-"
  if isinstance(value, bool):
    return "yes" if value else "no"
  if isinstance(value, (int, np.integer)):
    return str(value)
  return format(value, spec) if isinstance(value, (int, float, np.floating)) else str(value)


def markdown_table(header, rows, cell=fmt) -> str:
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
  return "\n".join(lines)
