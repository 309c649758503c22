"""The in-process half of the sandbox: run as `python -I -S -c <this file's text> <settings json>` by
`specjax.benchmark.sandbox`, it sets the resource limits, drops root to `nobody` when asked, disables destructive and
escaping calls (the list follows HumanEval's `reliability_guard`), confines writes to the sandbox directory, and only
then compiles and runs the untrusted program.

It stops accidents, not a determined attacker (a program can re-import `posix` and get its functions back): the
walls that hold regardless are sandbox.py's (temp directory, scrubbed environment, rlimits, namespaces, group kill).
A refused call raises PermissionError, so the program exits non-zero and its tests fail.
"""

import builtins
import io
import json
import os
import posix
import resource
import shutil
import socket
import subprocess
import sys

# Refused outright (os and posix share the function objects, so both names are replaced).
BLOCKED = ("chmod", "fchmod", "lchmod", "chown", "fchown", "lchown", "chflags", "lchflags", "kill", "killpg",
           "fork", "forkpty", "vfork", "system", "popen", "execl", "execle", "execlp", "execlpe", "execv", "execve",
           "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp",
           "spawnvpe", "posix_spawn", "posix_spawnp", "putenv", "unsetenv", "chdir", "fchdir", "chroot", "symlink",
           "link", "removedirs", "renames", "ftruncate", "mknod", "mkfifo", "setsid", "setpgid", "setpgrp", "setuid",
           "seteuid", "setreuid", "setresuid", "setgid", "setegid", "setregid", "setresgid", "setgroups",
           "pidfd_open", "plock")
# Allowed only when every path lies inside the sandbox directory (tempfile needs unlink there, for example).
CONFINED = ("remove", "unlink", "rmdir", "rename", "replace", "truncate", "mkdir")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _refuse(name):
  def refused(*args, **kwargs):
    raise PermissionError(f"sandbox: {name} is disabled")
  return refused


def _inside(root, path) -> bool:
  if isinstance(path, int):  # an already open descriptor
    return True
  real = os.path.realpath(os.fsdecode(os.fspath(path)))
  return real == root or real.startswith(root + os.sep)


def _confine(root, name, real):
  def confined(*paths, **kwargs):
    if kwargs.get("dir_fd") is not None or kwargs.get("src_dir_fd") is not None or kwargs.get("dst_dir_fd") is not None:
      raise PermissionError(f"sandbox: os.{name} with dir_fd is disabled")
    for path in paths[:2 if name in ("rename", "replace") else 1]:
      if not _inside(root, path):
        raise PermissionError(f"sandbox: os.{name} outside the sandbox directory: {path!r}")
    return real(*paths, **kwargs)
  return confined


def set_limits(limits: dict) -> None:
  """Soft and hard limit alike, never above an existing hard limit; a limit the platform refuses is skipped."""
  for name, value in limits.items():
    kind = getattr(resource, name)
    hard = resource.getrlimit(kind)[1]
    if hard != resource.RLIM_INFINITY:
      value = min(value, hard)
    try:
      resource.setrlimit(kind, (value, value))
    except (ValueError, OSError):
      pass


def drop_privileges(uid: int, gid: int) -> None:
  os.setgroups([])
  os.setgid(gid)
  os.setuid(uid)


def install(root: str, env: dict, block_network: bool) -> None:
  real_open, real_os_open, real_fileio = builtins.open, os.open, io.FileIO

  def guarded_open(file, mode="r", *args, **kwargs):
    if any(c in mode for c in "wax+") and not _inside(root, file):
      raise PermissionError(f"sandbox: writing outside the sandbox directory: {file!r}")
    return real_open(file, mode, *args, **kwargs)

  def guarded_os_open(path, flags, *args, **kwargs):
    if flags & WRITE_FLAGS and (kwargs.get("dir_fd") is not None or not _inside(root, path)):
      raise PermissionError(f"sandbox: writing outside the sandbox directory: {path!r}")
    return real_os_open(path, flags, *args, **kwargs)

  class GuardedFileIO(real_fileio):
    def __init__(self, file, mode="r", *args, **kwargs):
      if any(c in mode for c in "wax+") and not _inside(root, file):
        raise PermissionError(f"sandbox: writing outside the sandbox directory: {file!r}")
      super().__init__(file, mode, *args, **kwargs)

  os.environ.clear()  # the caller passed only these; keep exactly them
  os.environ.update(env)
  builtins.open = io.open = guarded_open
  io.FileIO = GuardedFileIO
  os.open = posix.open = guarded_os_open
  for name in BLOCKED:
    for module in (os, posix):
      if hasattr(module, name):
        setattr(module, name, _refuse(f"os.{name}"))
  for name in CONFINED:
    confined = _confine(root, name, getattr(posix, name))
    os.__dict__[name] = posix.__dict__[name] = confined
  for name in ("rmtree", "move", "chown", "copy", "copy2", "copyfile", "copyfileobj", "copymode", "copystat",
               "copytree"):
    setattr(shutil, name, _refuse(f"shutil.{name}"))
  for name in ("Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"):
    setattr(subprocess, name, _refuse(f"subprocess.{name}"))
  for name in ("setrlimit", "prlimit"):
    setattr(resource, name, _refuse(f"resource.{name}"))
  import _posixsubprocess
  _posixsubprocess.fork_exec = _refuse("_posixsubprocess.fork_exec")
  for name in ("ctypes", "_ctypes"):
    sys.modules[name] = None  # `import ctypes` raises ImportError
  if block_network:
    import _socket
    refused = _refuse("network access")
    socket.socket = socket.SocketType = _socket.socket = type("socket", (), {"__init__": refused})
    for name in ("create_connection", "create_server", "socketpair", "fromfd", "getaddrinfo"):
      setattr(socket, name, refused)
  builtins.exit = builtins.quit = sys.exit  # -S skips site, which defines them


def main(settings: dict) -> None:
  set_limits(settings["limits"])
  if settings.get("uid") is not None:
    drop_privileges(settings["uid"], settings["gid"])
  with open(settings["program"], encoding="utf-8") as f:
    source = f.read()
  install(os.path.realpath(settings["root"]), settings["env"], settings["block_network"])
  code = compile(source, "program.py", "exec")
  sys.argv = ["program.py"]
  exec(code, {"__name__": "__main__", "__builtins__": builtins})


if __name__ == "__main__":
  main(json.loads(sys.argv[1]))
