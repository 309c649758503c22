"""Large host buffers on transparent huge pages: weights that are read whole at every step (`back_with_huge_pages`),
and processes that allocate buffers again and again (the server, `relaunch_with_huge_pages`).

XLA:CPU gives every program call fresh output buffers; glibc maps each one above 32 MB anew and the kernel faults it
in 4 KB at a time. Measured on SmolLM2's 16-row KV cache (1.5 GB): zeroing it 0.75 s, 0.09 s on 2 MB pages. glibc
takes its tunables only at process start, so `relaunch_with_huge_pages` re-executes the process once with them.
"""

import ctypes
import os
import sys

TUNABLE = "glibc.malloc.hugetlb=1"   # glibc >= 2.35: malloc advises huge pages for what it maps (older: ignored)
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
HUGE_PAGE = 2 << 20
MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25   # <asm-generic/mman-common.h>; MADV_COLLAPSE from Linux 6.1


def thp_mode(path: str = THP_ENABLED) -> str:
  """The kernel's transparent-huge-page mode ("always", "madvise" or "never"; "" where it has none)."""
  try:
    with open(path) as f:
      text = f.read()
  except OSError:
    return ""
  return text[text.find("[") + 1:text.find("]")] if "[" in text else ""


def turned_off() -> bool:
  """SPECJAX_HUGE_PAGES=0: neither the relaunch nor the weights' collapse asks for huge pages."""
  return os.environ.get("SPECJAX_HUGE_PAGES", "1") == "0"


def huge_page_env(environ: dict, mode: str) -> dict | None:
  """The environment that asks glibc for huge pages, or None where nothing needs changing (the kernel backs every
  mapping with them anyway, has none, or the tunable is set already)."""
  tunables = environ.get("GLIBC_TUNABLES", "")
  if mode != "madvise" or TUNABLE.split("=")[0] in tunables:
    return None
  return {**environ, "GLIBC_TUNABLES": f"{tunables}:{TUNABLE}" if tunables else TUNABLE}


def relaunch_with_huge_pages() -> None:
  """Re-executes this script (same pid, argv and interpreter) with `huge_page_env`, when it changes anything; call
  first thing in a script's main module. SPECJAX_HUGE_PAGES=0 turns it off."""
  if turned_off():
    return
  env = huge_page_env(dict(os.environ), thp_mode())
  if env is not None:
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def anonymous_regions(maps: str) -> list[tuple[int, int]]:
  """[low, high) of each private, writable anonymous mapping in a /proc/<pid>/maps text ([heap] included): where
  malloc's arenas and chunks live. Neighbours stay apart: a huge page must not straddle two mappings."""
  regions = []
  for line in maps.splitlines():
    fields = line.split()
    if len(fields) < 5 or fields[1] != "rw-p" or fields[4] != "0" or (len(fields) > 5 and fields[5] != "[heap]"):
      continue
    low, high = (int(v, 16) for v in fields[0].split("-"))
    regions.append((low, high))
  return regions


def huge_ranges(buffers, regions) -> list[tuple[int, int]]:
  """The 2 MB pages that hold the (address, nbytes) `buffers`, within whole pages of the anonymous regions they lie
  in (a page may hold a neighbour's bytes too, never another mapping's), merged into [start, end) per region."""
  ranges = set()
  for address, nbytes in buffers:
    for low, high in regions:
      start = max(address // HUGE_PAGE, -(-low // HUGE_PAGE)) * HUGE_PAGE
      end = min(-(-(address + nbytes) // HUGE_PAGE), high // HUGE_PAGE) * HUGE_PAGE
      if end > start:
        ranges.add((low, start, end))
  merged: list[tuple[int, int, int]] = []
  for region, start, end in sorted(ranges):
    if merged and merged[-1][0] == region and start <= merged[-1][2]:
      merged[-1] = (region, merged[-1][1], max(end, merged[-1][2]))
    else:
      merged.append((region, start, end))
  return [(start, end) for _, start, end in merged]


def back_with_huge_pages(arrays) -> int:
  """Moves the host buffers of `arrays` (jax.Arrays on CPU) onto 2 MB pages now: madvise MADV_HUGEPAGE, then
  MADV_COLLAPSE, over the huge pages that hold them (`huge_ranges`). XLA allocates weights on 4 KB pages, and a
  kernel streaming them misses the TLB every 4 KB (docs/results.md section 45). A hint: returns the bytes collapsed,
  0 where the kernel has no huge pages for this process; contents stay as they are. SPECJAX_HUGE_PAGES=0: off."""
  if turned_off() or thp_mode() not in ("always", "madvise"):
    return 0
  buffers = [(shard.data.unsafe_buffer_pointer(), shard.data.nbytes) for array in arrays
             for shard in array.addressable_shards if shard.device.platform == "cpu"]
  with open("/proc/self/maps") as f:
    ranges = huge_ranges(buffers, anonymous_regions(f.read()))
  madvise = ctypes.CDLL(None, use_errno=True).madvise
  madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
  collapsed = 0
  for start, end in ranges:
    if madvise(start, end - start, MADV_HUGEPAGE) == 0 and madvise(start, end - start, MADV_COLLAPSE) == 0:
      collapsed += end - start
  return collapsed
