"""Runs an untrusted Python program (a model's generated code and its tests) in a sandbox; `run(source, timeout_s)`.

Walls, outermost first: a fresh temporary directory as cwd, HOME and TMPDIR (removed afterwards, always); an
environment of PATH, HOME, TMPDIR and LANG only; `python -I -S` (no site-packages, no PYTHON* variables); when root on
Linux and `unshare` works, fresh network and PID namespaces (no network at all; everything the program starts dies
with it); a new session whose process group is SIGKILLed at the timeout and after a normal exit; resource limits
(address space, CPU seconds, file size, no core files); when root and the interpreter is readable by `nobody`, the
program runs as `nobody`; and sandbox_guard.py inside the child (destructive and escaping calls refused, writes
confined to the directory, and the network refused when there is no network namespace).
"""

import functools
import json
import math
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

ADDRESS_SPACE = 1 << 30   # RLIMIT_AS: bytes
FILE_SIZE = 16 << 20      # RLIMIT_FSIZE: bytes
NPROC = 64                # RLIMIT_NPROC when running as nobody (per user; root is exempt)
PATH = "/usr/local/bin:/usr/bin:/bin"
_GUARD = pathlib.Path(__file__).with_name("sandbox_guard.py").read_text(encoding="utf-8")  # runs via -c
_UNSHARE = ("--net", "--pid", "--fork", "--kill-child")


class Result(NamedTuple):
  ok: bool              # exited 0 within the timeout
  returncode: int | None
  timed_out: bool
  stderr: str           # its last 4 KiB, for diagnosis


@functools.lru_cache(maxsize=None)
def namespaces() -> bool:
  """True when root on Linux and `unshare --net --pid --fork` works here (checked once)."""
  unshare = shutil.which("unshare")
  if not (sys.platform.startswith("linux") and os.geteuid() == 0 and unshare):
    return False
  try:
    return subprocess.run([unshare, *_UNSHARE, "true"], capture_output=True, timeout=10).returncode == 0
  except (OSError, subprocess.SubprocessError):
    return False


@functools.lru_cache(maxsize=None)
def run_as_nobody(python: str = sys.executable) -> bool:
  """True when root and `nobody` can run this interpreter's stdlib (not when it lives under a private /root)."""
  if os.geteuid() != 0:
    return False
  try:
    pwd.getpwnam("nobody")
  except KeyError:
    return False
  return _run("import decimal, fractions, statistics", 10.0, python, drop=True).ok


def describe(timeout_s: float = 5.0) -> str:
  """One line naming the walls in force here, for the benchmark report."""
  limits = f"AS {ADDRESS_SPACE >> 30} GiB, CPU {math.ceil(timeout_s)} s, FSIZE {FILE_SIZE >> 20} MiB, no core"
  walls = ["temp dir", "scrubbed env", "python -I -S", f"rlimits ({limits})", "guard"]
  if run_as_nobody(sys.executable):
    walls.append(f"user nobody (NPROC {NPROC})")
  walls.append("no network (netns), own PID namespace" if namespaces() else "no network (guard)")
  return "sandboxed: " + ", ".join(walls) + f", process group killed after {timeout_s:g} s or at exit"


def run(source: str, timeout_s: float = 5.0) -> Result:
  """Runs `source` as __main__ in the sandbox; ok when it exits 0 within timeout_s (wall clock). Never raises for
  anything the program does; returns within about timeout_s plus process start-up."""
  python = sys.executable
  return _run(source, timeout_s, python, drop=run_as_nobody(python))


def _limits(timeout_s: float, drop: bool) -> dict:
  limits = {"RLIMIT_AS": ADDRESS_SPACE, "RLIMIT_CPU": max(1, math.ceil(timeout_s)), "RLIMIT_FSIZE": FILE_SIZE,
            "RLIMIT_CORE": 0}
  if drop:
    limits["RLIMIT_NPROC"] = NPROC
  return limits


def _run(source: str, timeout_s: float, python: str, drop: bool) -> Result:
  root = None
  try:
    root = tempfile.mkdtemp(prefix="specjax-sandbox-")
    program = os.path.join(root, "program.py")
    with open(program, "w", encoding="utf-8") as f:
      f.write(source)
    env = {"PATH": PATH, "HOME": root, "TMPDIR": root, "LANG": "C.UTF-8"}
    settings = {"root": root, "program": program, "env": env, "limits": _limits(timeout_s, drop),
                "block_network": not namespaces()}
    if drop:
      user = pwd.getpwnam("nobody")
      settings.update(uid=user.pw_uid, gid=user.pw_gid)
      for path in (root, program):
        os.chown(path, user.pw_uid, user.pw_gid)
    command = [python, "-I", "-S", "-c", _GUARD, json.dumps(settings)]
    if namespaces():
      command = [shutil.which("unshare"), *_UNSHARE, *command]
    with tempfile.TemporaryFile() as stderr:
      result = _execute(command, root, env, stderr, timeout_s)
      stderr.seek(max(0, stderr.seek(0, os.SEEK_END) - 4096))
      return result._replace(stderr=stderr.read().decode("utf-8", "replace"))
  except (OSError, subprocess.SubprocessError, ValueError) as err:
    return Result(False, None, False, f"sandbox error: {err!r}")
  finally:
    if root is not None:
      _remove(root)


def _execute(command, cwd, env, stderr, timeout_s) -> Result:
  """Starts the command in a new session; kills its whole process group at the timeout and after it exits."""
  deadline = time.monotonic() + timeout_s
  proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=stderr, start_new_session=True, close_fds=True)
  timed_out = False
  try:
    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
  except subprocess.TimeoutExpired:
    timed_out = True
  finally:
    try:
      os.killpg(proc.pid, signal.SIGKILL)  # the group id is the leader's pid (start_new_session)
    except (ProcessLookupError, PermissionError):
      pass
    proc.wait()
  code = None if timed_out else proc.returncode
  return Result(code == 0, code, timed_out, "")


def _remove(root: str) -> None:
  """Removes the directory even where the program left unwritable subdirectories (chmod is refused, mkdir's mode
  is not)."""
  def retry(function, path, _):
    try:
      os.chmod(os.path.dirname(path), 0o700)
      os.chmod(path, 0o700)
    except OSError:
      pass
    try:
      function(path)
    except OSError:
      pass
  shutil.rmtree(root, onerror=retry)
