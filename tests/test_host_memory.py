import os
import subprocess
import sys

import pytest

from specjax import host_memory


def test_the_kernels_huge_page_mode_is_read(tmp_path):
  path = tmp_path / "enabled"
  path.write_text("always [madvise] never\n")
  assert host_memory.thp_mode(str(path)) == "madvise"
  assert host_memory.thp_mode(str(tmp_path / "missing")) == ""


def test_glibc_is_asked_for_huge_pages_only_where_it_changes_something():
  assert host_memory.huge_page_env({"A": "1"}, "madvise") == {"A": "1", "GLIBC_TUNABLES": host_memory.TUNABLE}
  assert host_memory.huge_page_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, "madvise") == {
      "GLIBC_TUNABLES": "glibc.malloc.arena_max=2:" + host_memory.TUNABLE}
  assert host_memory.huge_page_env({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, "madvise") is None  # the user's
  assert host_memory.huge_page_env({}, "always") is None and host_memory.huge_page_env({}, "never") is None


def test_a_script_relaunches_itself_once_with_the_tunable(tmp_path):
  script = tmp_path / "script.py"
  script.write_text("import os, sys\nsys.path.insert(0, sys.argv[1])\nfrom specjax import host_memory\n"
                    "print('started', flush=True)\nhost_memory.relaunch_with_huge_pages()\n"
                    "print(os.environ.get('GLIBC_TUNABLES', '-'))\n")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "SPECJAX_HUGE_PAGES")}
  out = subprocess.run([sys.executable, str(script), root], env=env, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  relaunched = host_memory.thp_mode() == "madvise"   # then the script starts twice (once re-executed)
  assert out.stdout.split() == (["started", "started", host_memory.TUNABLE] if relaunched else ["started", "-"])
  off = subprocess.run([sys.executable, str(script), root], env={**env, "SPECJAX_HUGE_PAGES": "0"},
                       capture_output=True, text=True, timeout=120)
  assert off.stdout.split() == ["started", "-"]


def test_the_huge_interior_is_the_whole_2mb_pages_inside_a_buffer():
  page = host_memory.HUGE_PAGE
  assert host_memory.huge_interior(page + 8, 3 * page) == (2 * page, 4 * page)
  assert host_memory.huge_interior(2 * page, 2 * page) == (2 * page, 4 * page)
  start, end = host_memory.huge_interior(page + 8, page)
  assert end <= start   # no whole huge page inside


def _huge_kb_of_mapping(address: int) -> int:
  """AnonHugePages (kB) of the mapping of this process that holds `address`."""
  inside = False
  with open("/proc/self/smaps") as f:
    for line in f:
      head = line.split()[0]
      if "-" in head and ":" not in head:
        low, high = (int(v, 16) for v in head.split("-"))
        inside = low <= address < high
      elif inside and head == "AnonHugePages:":
        return int(line.split()[1])
  return 0


def test_weights_move_onto_huge_pages_with_their_contents(monkeypatch):
  import jax
  import jax.numpy as jnp
  import numpy as np
  weights = jax.random.normal(jax.random.key(0), (3 << 20,), jnp.float32)   # 12 MB
  expected = np.asarray(weights).copy()
  monkeypatch.setenv("SPECJAX_HUGE_PAGES", "0")
  assert host_memory.back_with_huge_pages([weights]) == 0
  monkeypatch.delenv("SPECJAX_HUGE_PAGES")
  collapsed = host_memory.back_with_huge_pages([weights])
  np.testing.assert_array_equal(np.asarray(weights), expected)
  if host_memory.thp_mode() not in ("always", "madvise"):
    assert collapsed == 0
    return
  if collapsed == 0:
    pytest.skip("this kernel collapsed nothing (MADV_COLLAPSE needs Linux >= 6.1)")
  start, end = host_memory.huge_interior(weights.unsafe_buffer_pointer(), weights.nbytes)
  assert collapsed == end - start >= 4 * host_memory.HUGE_PAGE
  assert _huge_kb_of_mapping(start) * 1024 >= collapsed
