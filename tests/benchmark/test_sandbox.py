"""The sandbox that runs generated code: every escape fails (False) within the timeout + 1 s and leaves no trace;
correct code still passes, with the same result as an unsandboxed run."""

import os
import pathlib
import socket
import subprocess
import sys
import time
import uuid

import pytest

from specjax.benchmark import quality, sandbox, tasks

TIMEOUT = 2.0


def _fails(program: str, timeout_s: float = TIMEOUT) -> None:
  start = time.monotonic()
  assert quality.run_tests(program, [], timeout_s) is False
  assert time.monotonic() - start < timeout_s + 1


@pytest.fixture(params=["namespaces", "guard"])
def mode(request, monkeypatch):
  """Each wall set this machine has: network and PID namespaces (when root with unshare), and the guard alone."""
  if request.param == "namespaces" and not sandbox.namespaces():
    pytest.skip("no network/PID namespaces here (needs root on Linux and a working unshare)")
  if request.param == "guard":
    monkeypatch.setattr(sandbox, "namespaces", lambda: False)
  return request.param


def test_correct_program_passes_and_describe_names_the_walls():
  assert quality.run_tests("import collections, json, math, re, tempfile\ndef f(x):\n    return x + 1",
                           ["assert f(1) == 2", "exit(0)"], TIMEOUT)
  text = sandbox.describe(TIMEOUT)
  assert text.startswith("sandboxed: temp dir, scrubbed env") and "CPU 2 s" in text
  assert ("netns" in text) == sandbox.namespaces()


def test_stdlib_temp_files_work_inside_the_sandbox_directory():
  assert quality.run_tests("""
import os, pathlib, tempfile
with tempfile.NamedTemporaryFile("w") as f:
    f.write("x")
os.makedirs("a/b")
pathlib.Path("a/b/c.txt").write_text("x")
os.rename("a/b/c.txt", "a/d.txt")
os.remove("a/d.txt")
assert os.getcwd() == os.path.expanduser("~") == tempfile.gettempdir()
""", [], TIMEOUT)


@pytest.mark.parametrize("then", ["time.sleep(30)", "os.makedirs('locked/inner')\nopen('locked/inner/f', 'w')\n"
                                  "os.mkdir('locked/shut', 0)"])
def test_the_sandbox_directory_is_removed_even_after_a_timeout(then):
  result = sandbox.run(f"import os, sys, time\nprint(os.getcwd(), file=sys.stderr, flush=True)\n{then}", TIMEOUT)
  root = result.stderr.splitlines()[0]
  assert "specjax-sandbox-" in root and not os.path.exists(root)
  assert result.ok == (not result.timed_out) == ("sleep" not in then)


@pytest.mark.parametrize("delete", [
    "os.remove(PATH)", "os.unlink(PATH)", "pathlib.Path(PATH).unlink()", "shutil.rmtree(os.path.dirname(PATH))",
    "os.rename(PATH, PATH + '.moved')", "os.truncate(PATH, 0)", "open(PATH, 'w').close()",
    "os.chmod(PATH, 0)", "os.system('rm -f ' + PATH)", "subprocess.run(['rm', '-f', PATH])"])
def test_cannot_delete_or_change_a_file_outside(tmp_path, delete):
  victim = tmp_path / "keep" / "file.txt"
  victim.parent.mkdir()
  victim.write_text("precious")
  _fails(f"import os, pathlib, shutil, subprocess\nPATH = {str(victim)!r}\n{delete}")
  assert victim.read_text() == "precious" and sorted(victim.parent.iterdir()) == [victim]
  assert victim.stat().st_mode & 0o777 != 0


def test_cannot_write_into_the_callers_cwd_or_home(tmp_path, monkeypatch):
  cwd, home = tmp_path / "cwd", tmp_path / "home"
  cwd.mkdir()
  home.mkdir()
  monkeypatch.chdir(cwd)
  monkeypatch.setenv("HOME", str(home))
  for target in (cwd, home):
    real = os.path.realpath(target)
    # A relative path or "~" lands in the sandbox directory, so the program's check that it reached the caller's
    # directory fails; an absolute path into the caller's directory is refused.
    _fails(f"open('leak.txt', 'w').write('x')\nimport os\nassert os.path.exists({real!r} + '/leak.txt')")
    _fails(f"import os\nopen(os.path.expanduser('~/leak.txt'), 'w').write('x')\n"
           f"assert os.path.exists({real!r} + '/leak.txt')")
    _fails(f"open({real!r} + '/leak.txt', 'w').write('x')")
    _fails(f"open({real!r} + '/leak.txt', 'a').write('x')")
    _fails(f"import pathlib\npathlib.Path({real!r}, 'leak.txt').write_text('x')")
    _fails(f"import os\nos.close(os.open({real!r} + '/leak.txt', os.O_CREAT | os.O_WRONLY))")
    _fails(f"import os\nos.mkdir({real!r} + '/leak')")
    _fails(f"import io\nio.FileIO({real!r} + '/leak.txt', 'w').close()")
  assert list(cwd.iterdir()) == [] and list(home.iterdir()) == []


def test_large_allocation_fails_quickly():
  start = time.monotonic()
  _fails("x = bytearray(8 << 30)\nx[-1] = 1")
  assert time.monotonic() - start < 1.5
  _fails("chunks = []\nwhile True:\n    chunks.append(bytearray(64 << 20))")


def _running(token: str) -> bool:
  for entry in pathlib.Path("/proc").iterdir():
    try:
      if entry.name.isdigit() and token.encode() in (entry / "cmdline").read_bytes():
        return True
    except OSError:
      pass
  return False


def _no_process_left(token: str) -> bool:
  deadline = time.monotonic() + 1.0  # a killed namespace's processes are reaped asynchronously
  while _running(token) and time.monotonic() < deadline:
    time.sleep(0.05)
  return not _running(token)


# A guard-refused spawn leaves the program running until the timeout; the bypasses get the original posix module
# back (the guard stops accidents only) so that the outer walls (process group kill, PID namespace) must hold.
SPAWNS = {
    "subprocess": "subprocess.Popen(CMD)",
    "fork": "if os.fork() == 0:\n        os.execv(CMD[0], CMD)",
    "system": "os.system(CMD[2] + ' &')",
    "posix_spawn": "os.posix_spawn(CMD[0], CMD, {})",
    "multiprocessing": "multiprocessing.Process(target=os.execv, args=(CMD[0], CMD)).start()",
}
BYPASS = "del sys.modules['posix']\nimport posix\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("spawn", sorted(SPAWNS))
def test_child_processes_are_refused_and_the_program_is_stopped(spawn):
  token = f"specjax-{uuid.uuid4().hex}"
  _fails(f"import multiprocessing, os, subprocess, time\nCMD = ['/bin/sh', '-c', 'sleep 30; echo {token}']\n"
         f"try:\n    {SPAWNS[spawn]}\nexcept Exception:\n    pass\ntime.sleep(30)")
  assert _no_process_left(token)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("then", ["sleep", "exit"])
def test_children_that_bypass_the_guard_are_killed(mode, then):
  token = f"specjax-{uuid.uuid4().hex}"
  _fails(f"import sys, time\n{BYPASS}if posix.fork() == 0:\n    posix.execv('/bin/sh', ['sh', '-c', "
         f"'sleep 30; echo {token}'])\n" + ("time.sleep(30)" if then == "sleep" else "sys.exit(1)"))
  assert _no_process_left(token)


@pytest.mark.skipif(not sandbox.namespaces(), reason="a child in its own session escapes the group kill "
                    "without a PID namespace")
def test_a_child_in_its_own_session_dies_with_the_pid_namespace():
  token = f"specjax-{uuid.uuid4().hex}"
  _fails(f"import sys\n{BYPASS}if posix.fork() == 0:\n    posix.setsid()\n    posix.execv('/bin/sh', ['sh', '-c', "
         f"'sleep 30; echo {token}'])\nsys.exit(1)")
  assert _no_process_left(token)


def test_callers_environment_is_not_visible(monkeypatch):
  monkeypatch.setenv("SPECJAX_SECRET", "value")
  program = "import os\nassert os.environ.get('SPECJAX_SECRET') == 'value'"
  assert subprocess.run([sys.executable, "-c", program]).returncode == 0  # would pass if the variable leaked
  _fails(program)
  _fails("import os\nassert 'value' in open('/proc/self/environ').read()")
  assert quality.run_tests("import os\nassert set(os.environ) <= {'PATH', 'HOME', 'TMPDIR', 'LANG', 'LC_CTYPE'}",
                           [], TIMEOUT)


def test_no_network(mode):
  server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
  server.bind(("127.0.0.1", 0))
  server.listen(4)
  try:
    port = server.getsockname()[1]
    program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).close()"
    assert subprocess.run([sys.executable, "-c", program]).returncode == 0  # reachable outside the sandbox
    _fails(program)
    _fails(f"import socket\ns = socket.socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', {port}))")
  finally:
    server.close()


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3") or os.geteuid() != 0, reason="needs root and a "
                    "system interpreter that nobody can read")
def test_runs_as_nobody_where_the_interpreter_allows():
  assert sandbox.run_as_nobody("/usr/bin/python3")
  result = sandbox._run("import os, decimal\nassert os.getuid() != 0 and os.getgid() != 0 and not os.getgroups()\n"
                        "open('x.txt', 'w').write('x')", TIMEOUT, "/usr/bin/python3", drop=True)
  assert result.ok, result.stderr


# Reference solutions of the benchmark's code prompts (the suite carries tests, not solutions).
SOLUTIONS = {
    "is_palindrome": "def is_palindrome(s):\n    s = s.lower()\n    return s == s[::-1]",
    "add": "def add(a, b):\n    return a + b",
    "factorial": "import math\ndef factorial(n):\n    return math.factorial(n)",
    "count_vowels": "def count_vowels(text):\n    return sum(c in 'aeiouAEIOU' for c in text)",
    "fizzbuzz": "def fizzbuzz(n):\n    return ['FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0\n"
                "            else 'Buzz' if i % 5 == 0 else str(i) for i in range(1, n + 1)]",
    "flatten": "import itertools\ndef flatten(lists):\n    return list(itertools.chain.from_iterable(lists))",
    "word_frequencies": "from collections import Counter\ndef word_frequencies(text):\n"
                        "    return dict(Counter(text.lower().split()))",
    "celsius_to_fahrenheit": "def celsius_to_fahrenheit(c):\n    return c * 9 / 5 + 32",
    "second_largest": "def second_largest(xs):\n    u = sorted(set(xs))\n    return u[-2] if len(u) > 1 else None",
    "merge_sorted": "import heapq\ndef merge_sorted(a, b):\n    return list(heapq.merge(a, b))",
}


def test_benchmark_code_prompts_score_as_without_the_sandbox():
  for spec in tasks.load_category("code"):
    solution = SOLUTIONS.get(spec["entry_point"])
    if solution is None:
      continue
    for code, expected in ((solution, 1.0), (solution.replace("return", "return None and"), 0.0)):
      program = code + "\n\n" + "\n".join(spec["tests"]) + "\n"
      plain = subprocess.run([sys.executable, "-I", "-c", program], capture_output=True).returncode == 0
      assert quality.score("code", f"```python\n{code}\n```", spec)["passes_tests"] == float(plain) == expected, (
          spec["id"], code)


def test_report_says_code_ran_in_the_sandbox():
  from specjax.benchmark import report
  assert report.code_execution_note({"execute_code": False}) == []
  line, blank = report.code_execution_note({"execute_code": True})
  assert "executed in the sandbox" in line and sandbox.describe() in line and blank == ""
