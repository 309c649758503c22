"""What a generation should hold in memory, beside what the process did hold (peak resident set)."""

import resource
import sys

import jax.numpy as jnp

from specjax.config import ModelConfig

GiB = 2**30


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


def cache_bytes(config: ModelConfig, batch: int, size: int) -> int:
  """K and V for every layer, row and position of a cache of `size` positions."""
  return 2 * config.n_layers * batch * size * config.n_kv_heads * config.head_dim_ * jnp.dtype(config.dtype).itemsize


def budget_bytes(param_bytes: int, config: ModelConfig, batch: int, size: int, slack: int = GiB) -> int:
  """Parameters + cache + slack (the runtime, the tokenizer, compiled programs): the ceiling a run should stay under."""
  return param_bytes + cache_bytes(config, batch, size) + slack
