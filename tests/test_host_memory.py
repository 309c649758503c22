import os
import subprocess
import sys

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
