"""The sweep's servers as subprocesses on a free loopback port: the command lines (scripts/serve.py with `--config.KEY=
VALUE` overrides; llama.cpp's llama-server on the f32 target, with the packaged Q4_1 file as its draft when asked),
the start (until /health answers 200, bounded; the log's tail in the error when it does not) and the stop (SIGTERM,
a bounded drain, then SIGKILL). Output goes to a log file, never to a pipe that could fill."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import httpx

from specjax.benchmark import llama_cpp, peers
from specjax.benchmark.serving.sweep_config import ROOT
from specjax.memory import proc_kib

HOST = "127.0.0.1"


def free_port() -> int:
  with socket.socket() as s:
    s.bind((HOST, 0))
    return s.getsockname()[1]


def flag_value(value) -> str:
  """A config value as config_flags parses it back: strings as they are, tuples and numbers as Python literals."""
  if isinstance(value, str):
    return value
  if isinstance(value, (list, tuple)):
    return repr(tuple(value))
  return repr(value)


def specjax_command(serve_config: str, overrides: dict, port: int) -> list[str]:
  """scripts/serve.py on serve_config with the overrides, listening on HOST:port."""
  settings = {**overrides, "host": HOST, "port": port}
  return [sys.executable, os.path.join(ROOT, "scripts", "serve.py"), f"--config={os.path.abspath(serve_config)}",
          *[f"--config.{key}={flag_value(value)}" for key, value in settings.items()]]


def llama_files(bin_dir: str, model: str, output_dir: str) -> tuple[str, str, str]:
  """(llama-server, f32 target, Q4_1 draft): the binaries checked, the target written once by llama-quantize."""
  bin_dir = llama_cpp.check_dir(bin_dir, llama_cpp.BINARIES + ("llama-server",), "a llama-server system")
  peer = llama_cpp.LlamaCppPeer({"llama_cpp_dir": bin_dir, "output_dir": output_dir, "weights": "float"},
                                peers.gguf_path(model))
  peer._target()   # the offline peer's f32 target, written the same way (kept in output_dir/llama_cpp)
  return os.path.join(bin_dir, "llama-server"), peer.target_path, peer.draft_path


def llama_server_command(files: tuple[str, str, str], draft_max: int, port: int, slots: int, ctx_per_slot: int,
                         threads: int) -> list[str]:
  """llama-server with `slots` parallel slots of ctx_per_slot tokens each, no prompt cache (specjax's server keeps
  none either), and draft_max > 0: the Q4_1 draft proposing exactly draft_max tokens a round."""
  server, target, draft = files
  command = [server, "-m", target, "--host", HOST, "--port", str(port), "-np", str(slots),
             "-c", str(slots * ctx_per_slot), "-t", str(threads), "-tb", str(threads), "--no-cache-prompt",
             "--cache-ram", "0", "--metrics", "--no-webui"]
  if draft_max:
    command += ["-md", draft, "--spec-type", "draft-simple", "--spec-draft-n-max", str(draft_max),
                "--spec-draft-n-min", str(draft_max), "--spec-draft-p-min", "0", "-td", str(threads),
                "-tbd", str(threads)]
  return command


def tail(path: str, chars: int = 2000) -> str:
  try:
    with open(path, errors="replace") as f:
      return f.read()[-chars:]
  except OSError:
    return ""


def rss_gib(pid: int) -> float | None:
  """A process's resident memory (GiB), None where /proc has none (another OS, a process gone)."""
  kib = proc_kib(f"/proc/{pid}/status", "VmRSS")
  return None if kib is None else kib / 2**20


def mem_available_gib() -> float | None:
  """The memory available to a new process (GiB, MemAvailable), None where /proc has none."""
  kib = proc_kib("/proc/meminfo", "MemAvailable")
  return None if kib is None else kib / 2**20


def wait_healthy(process: subprocess.Popen, base_url: str, timeout_s: float, log_path: str) -> float:
  """Seconds until GET /health answered 200; RuntimeError (with the log's tail) if the process exits or time runs
  out first."""
  start = time.perf_counter()
  with httpx.Client(trust_env=False, timeout=5.0) as http:
    while True:
      if process.poll() is not None:
        raise RuntimeError(f"the server exited with code {process.returncode} before it answered /health; "
                           f"its log ends:\n{tail(log_path)}")
      try:
        if http.get(base_url + "/health").status_code == 200:
          return time.perf_counter() - start
      except httpx.HTTPError:
        pass
      if time.perf_counter() - start > timeout_s:
        raise RuntimeError(f"the server did not answer /health with 200 within {timeout_s:.0f} s; its log ends:\n"
                           f"{tail(log_path)}")
      time.sleep(0.25)


def stop(process: subprocess.Popen, timeout_s: float) -> int:
  """SIGTERM, up to timeout_s to drain, then SIGKILL; the exit code."""
  if process.poll() is None:
    process.send_signal(signal.SIGTERM)
    try:
      process.wait(timeout_s)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()
  return process.returncode


@contextlib.contextmanager
def serving(command: list[str], port: int, log_path: str, startup_timeout_s: float, stop_timeout_s: float):
  """Starts `command`, yields (process, base url, seconds to healthy) once /health answers, stops it on exit."""
  os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
  with open(log_path, "w") as log:
    log.write(" ".join(command) + "\n\n")
    log.flush()
    # A session of its own: a Ctrl-C at the terminal reaches the sweep, which then stops the server itself.
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True)
  base_url = f"http://{HOST}:{port}"
  try:
    ready_s = wait_healthy(process, base_url, startup_timeout_s, log_path)
    yield process, base_url, ready_s
  finally:
    stop(process, stop_timeout_s)
