"""What a generation should hold in memory, beside what the process did hold (peak resident set)."""

import ctypes
import ctypes.util
import resource
import sys

import jax.numpy as jnp

from specjax.config import ModelConfig

GiB = 2**30
_M_ARENA_MAX = -8   # glibc's mallopt parameter


def proc_kib(path: str, field: str) -> int | None:
  """A kB field of a /proc file (`VmHWM` or `VmRSS` of /proc/PID/status, `MemAvailable` of /proc/meminfo); None
  where there is none (another OS, a process gone)."""
  try:
    with open(path) as f:
      return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
  except (OSError, StopIteration, ValueError, IndexError):
    return None


def peak_resident_bytes() -> int:
  """This process's peak resident set size so far.

  Linux reads VmHWM, the high-water mark of this address space: getrusage's ru_maxrss survives fork + exec, so a
  script started from a large parent (a test runner) would report the parent's peak as its own.
  """
  high_water = proc_kib("/proc/self/status", "VmHWM")
  if high_water is not None:
    return high_water * 1024
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return int(peak if sys.platform == "darwin" else peak * 1024)


def cap_malloc_arenas(arenas: int = 2) -> bool:
  """Caps glibc's malloc arenas (as MALLOC_ARENA_MAX does): XLA compiles on many threads, each of which would get
  an arena of its own whose freed pages stay resident. Call before JAX starts its threads. Returns whether the cap
  was set (False where the C library has no mallopt)."""
  if arenas < 1:
    raise ValueError(f"arenas must be at least 1, got {arenas}")
  name = ctypes.util.find_library("c")
  mallopt = getattr(ctypes.CDLL(name), "mallopt", None) if name else None
  return bool(mallopt is not None and mallopt(_M_ARENA_MAX, arenas))


def cache_bytes(config: ModelConfig, batch: int, size: int) -> int:
  """K and V for every layer, row and position of a cache of `size` positions."""
  return 2 * config.n_layers * batch * size * config.n_kv_heads * config.head_dim_ * jnp.dtype(config.dtype).itemsize


def budget_bytes(param_bytes: int, config: ModelConfig, batch: int, size: int, slack: int = GiB) -> int:
  """Parameters + cache + slack (the runtime, the tokenizer, compiled programs): the ceiling a run should stay under."""
  return param_bytes + cache_bytes(config, batch, size) + slack
