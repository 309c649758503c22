"""Where the host placed the CPUs a two-core decode step runs on, measured as a cache line's round trip between them.

On this project's 2-vCPU VM the host moves the vCPUs every 10-60 s between one die (a shared L3 and memory link:
0.07-0.14 us) and two (0.39-0.55 us, twice the memory links), and the autoregressive step follows: medians
13.65 vs 9.49 ms (docs/results.md section 54). Records carry the probe, so a speedup is read with its placement.
"""

import ctypes
import os

from specjax.kernels import build

FAR_US = 0.25  # between the two placements measured on the project's VM (0.07-0.14 vs 0.39-0.55 us)


def core_round_trip_us(trips: int = 2000) -> float | None:
  """The median round trip between the first two CPUs this process may run on, in microseconds; None with one CPU
  or without the kernels' library (no compiler, not x86-64)."""
  if trips < 1:
    raise ValueError(f"trips must be >= 1, got {trips}")
  cpus = sorted(os.sched_getaffinity(0))
  library = build.library() if len(cpus) >= 2 else None
  if library is None:
    return None
  probe = library.SpecjaxCoreRoundTripUs
  probe.restype, probe.argtypes = ctypes.c_double, [ctypes.c_int] * 3
  us = probe(cpus[0], cpus[1], trips)
  return us if us >= 0 else None


def placement(round_trip_us: float | None) -> str:
  """"near" (one die), "far" (two dies) or "" (not measured), by `FAR_US`."""
  if round_trip_us is None:
    return ""
  return "far" if round_trip_us >= FAR_US else "near"
