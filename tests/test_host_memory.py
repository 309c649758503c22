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


def test_huge_pages_hold_a_buffer_within_its_anonymous_region():
  page = host_memory.HUGE_PAGE
  maps = (f"{page:x}-{5 * page:x} rw-p 00000000 00:00 0 \n"
          f"{5 * page:x}-{8 * page + 4096:x} rw-p 00000000 00:00 0 [heap]\n"
          f"{8 * page + 4096:x}-{8 * page + 8192:x} ---p 00000000 00:00 0 \n"          # a guard page
          f"{8 * page + 8192:x}-{12 * page:x} r--p 00000000 fd:01 1234 /usr/lib/libc.so\n"
          f"{12 * page:x}-{20 * page:x} rw-p 00000000 00:00 0 [stack]\n")
  regions = host_memory.anonymous_regions(maps)
  assert regions == [(page, 5 * page), (5 * page, 8 * page + 4096)]
  # two buffers sharing a page merge; a buffer across two mappings gets the whole pages of each; the guard page,
  # the file and the stack are left alone
  assert host_memory.huge_ranges([(page + 8, page), (2 * page + 8, 10), (4 * page, 6 * page)], regions) == [
      (page, 3 * page), (4 * page, 5 * page), (5 * page, 8 * page)]
  assert host_memory.huge_ranges([(9 * page, page), (13 * page, page)], regions) == []


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
  page = host_memory.HUGE_PAGE
  assert collapsed >= 4 * page   # 6 pages' bytes; a mapping of their own (glibc's for 12 MB) holds 5 whole pages
  middle = (weights.unsafe_buffer_pointer() + weights.nbytes // 2) // page * page
  assert _huge_kb_of_mapping(middle) * 1024 >= 4 * page
