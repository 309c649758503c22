"""What a generation should hold in memory, beside what the process did hold (peak resident set)."""

import resource
import sys

import jax.numpy as jnp

from specjax.config import ModelConfig

GiB = 2**30


def peak_resident_bytes() -> int:
  """This process's peak resident set size so far.

  Linux reads VmHWM, the high-water mark of this address space: getrusage's ru_maxrss survives fork + exec, so a
  script started from a large parent (a test runner) would report the parent's peak as its own.
  """
  try:
    with open("/proc/self/status") as status:
      for line in status:
        if line.startswith("VmHWM:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  return int(peak if sys.platform == "darwin" else peak * 1024)


def cache_bytes(config: ModelConfig, batch: int, size: int) -> int:
  """K and V for every layer, row and position of a cache of `size` positions."""
  return 2 * config.n_layers * batch * size * config.n_kv_heads * config.head_dim_ * jnp.dtype(config.dtype).itemsize


def budget_bytes(param_bytes: int, config: ModelConfig, batch: int, size: int, slack: int = GiB) -> int:
  """Parameters + cache + slack (the runtime, the tokenizer, compiled programs): the ceiling a run should stay under."""
  return param_bytes + cache_bytes(config, batch, size) + slack
