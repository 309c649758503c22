"""Builds `cpu_linear.cc` once per source, jaxlib and compiler into the user's cache and registers it with XLA.

Built on first use (a few seconds with g++); any failure (no compiler, not x86-64 with AVX2 and FMA) leaves the
kernel unavailable and the model on XLA's own dot, with the reason in `unavailable_reason()`.
"""

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile

import jax
import jaxlib

SOURCE = os.path.join(os.path.dirname(__file__), "cpu_linear.cc")
TARGET_NAME = "specjax_cpu_linear"
FLAGS = ("-O3", "-mavx2", "-mfma", "-std=c++17", "-shared", "-fPIC", "-w")
_reason: list[str] = []


def _cpu_has_avx2_fma() -> bool:
  try:
    with open("/proc/cpuinfo") as f:
      flags = next((line for line in f if line.startswith("flags")), "").split()
  except OSError:
    return False
  return "avx2" in flags and "fma" in flags


def _cache_dir() -> str:
  return os.path.expanduser(os.environ.get("SPECJAX_KERNEL_CACHE", "~/.cache/specjax/kernels"))


def _compile(compiler: str) -> str:
  with open(SOURCE, "rb") as f:
    digest = hashlib.sha256(f.read() + jaxlib.__version__.encode() + " ".join(FLAGS).encode()).hexdigest()[:16]
  path = os.path.join(_cache_dir(), f"cpu_linear-{digest}.so")
  if os.path.exists(path):
    return path
  os.makedirs(_cache_dir(), exist_ok=True)
  fd, tmp = tempfile.mkstemp(suffix=".so", dir=_cache_dir())
  os.close(fd)
  try:
    subprocess.run([compiler, *FLAGS, f"-I{jax.ffi.include_dir()}", SOURCE, "-o", tmp], check=True,
                   capture_output=True, text=True, timeout=300)
    os.replace(tmp, path)  # atomic: a concurrent build or a crash never leaves a half-written library
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  return path


@functools.lru_cache(maxsize=1)
def registered() -> bool:
  """True once the kernel is built, loaded and registered for the CPU platform."""
  if os.environ.get("SPECJAX_CPU_KERNELS", "1") == "0":
    _reason.append("disabled by SPECJAX_CPU_KERNELS=0")
    return False
  if platform.machine().lower() not in ("x86_64", "amd64") or not _cpu_has_avx2_fma():
    _reason.append("needs an x86-64 CPU with AVX2 and FMA")
    return False
  compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
  if compiler is None:
    _reason.append("no C++ compiler (g++ or clang++) on PATH")
    return False
  try:
    library = ctypes.cdll.LoadLibrary(_compile(compiler))
  except (OSError, subprocess.SubprocessError) as error:
    detail = getattr(error, "stderr", "") or str(error)
    _reason.append(f"building {SOURCE} failed: {detail[-500:]}")
    return False
  jax.ffi.register_ffi_target(TARGET_NAME, jax.ffi.pycapsule(library.SpecjaxCpuLinear), platform="cpu")
  return True


def unavailable_reason() -> str:
  return "; ".join(_reason)
