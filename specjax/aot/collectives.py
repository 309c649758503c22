"""The communication a sharding implies, read from the compiled (partitioned) HLO: every collective, its
result size and group size, and the bytes each device moves for it (ring algorithms)."""

import collections
import math
import re

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
                "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_OP = re.compile(r"=\s+(.*?)\s+(" + "|".join(KINDS) + r")(-start)?\(")
_SHAPE = re.compile(r"\b([a-z]+\d*[a-z0-9]*)\[([\d,]*)\]")
_IOTA_GROUPS = re.compile(r"replica_groups=\[(\d+),(\d+)\]")
_LIST_GROUPS = re.compile(r"replica_groups=\{\{([\d,]*)\}")
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")
_MESH_AXIS = re.compile(r"'([^']+)'=(\d+)")


def _shape_bytes(text: str) -> list[int]:
  sizes = []
  for dtype, dims in _SHAPE.findall(text):
    if dtype in _DTYPE_BYTES:
      sizes.append(_DTYPE_BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d))
  return sizes


def _group_size(line: str, default: int) -> int:
  if m := _MESH_GROUPS.search(line):
    sizes = {name: int(size) for name, size in _MESH_AXIS.findall(m.group(1))}
    return math.prod(sizes.get(name.strip(" '"), 1) for name in m.group(2).split(",") if name.strip())
  if m := _IOTA_GROUPS.search(line):
    return int(m.group(2))
  if m := _LIST_GROUPS.search(line):
    return len([x for x in m.group(1).split(",") if x])
  return default


def moved_bytes(kind: str, result_bytes: int, group: int) -> float:
  """Bytes one device sends for the collective (ring all-reduce = reduce-scatter + all-gather)."""
  if group <= 1:
    return 0.0
  share = (group - 1) / group
  return {"all-reduce": 2 * share * result_bytes, "all-gather": share * result_bytes,
          "reduce-scatter": (group - 1) * result_bytes, "all-to-all": share * result_bytes,
          "collective-permute": float(result_bytes)}[kind]


def collectives(hlo_text: str, default_group: int) -> dict:
  """{kind: {"count", "result_bytes", "moved_bytes"}} over the module (async *-done halves are not counted)."""
  summary = collections.defaultdict(lambda: {"count": 0, "result_bytes": 0, "moved_bytes": 0.0})
  for line in hlo_text.splitlines():
    match = _OP.search(line)
    if not match:
      continue
    result_type, kind, is_async = match.groups()
    sizes = _shape_bytes(result_type)
    # An async start returns (operand, result[, scratch]): the largest one is the collective's payload.
    size = max(sizes) if is_async else sum(sizes)
    entry = summary[kind]
    entry["count"] += 1
    entry["result_bytes"] += size
    entry["moved_bytes"] += moved_bytes(kind, size, _group_size(line, default_group))
  return dict(summary)
