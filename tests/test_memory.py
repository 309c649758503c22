"""Peak resident memory is the process's own, not its parent's; the budget it is held to; malloc's arenas capped."""

import subprocess
import sys

import numpy as np
import pytest

from specjax import memory


def test_peak_resident_is_not_inherited_from_a_large_parent():
  ballast = np.ones(2**27)  # 1 GiB held by this process
  assert memory.peak_resident_bytes() >= ballast.nbytes
  child = subprocess.run([sys.executable, "-c", "from specjax import memory; print(memory.peak_resident_bytes())"],
                         capture_output=True, text=True, check=True)
  assert int(child.stdout) < ballast.nbytes // 2, "the child reported its parent's peak as its own"


def test_budget_is_parameters_plus_cache_plus_slack():
  from specjax.config import ModelConfig
  config = ModelConfig(vocab_size=32, d_model=16, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=32,
                       max_seq_len=64)
  cache = memory.cache_bytes(config, batch=3, size=10)
  assert cache == 2 * 2 * 3 * 10 * 1 * 8 * 4
  assert memory.budget_bytes(1000, config, 3, 10) == 1000 + cache + memory.GiB


def test_malloc_arenas_are_capped_where_glibc_is():
  """A subprocess (the cap lasts for the process): set on glibc (mallopt answers 1), refused below one arena."""
  import platform
  code = "from specjax import memory; print(memory.cap_malloc_arenas(2))"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()[-1]
  assert out == str(platform.libc_ver()[0] == "glibc")
  with pytest.raises(ValueError, match="at least 1"):
    memory.cap_malloc_arenas(0)
