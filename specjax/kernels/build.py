"""Builds the CPU kernels (`cpu_linear.cc`, `cpu_packed.cc`, `cpu_attention.cc`, `cpu_quant.cc`) and the machine
probe (`cpu_probe.cc`) into one library, once per source, jaxlib and compiler, in the user's cache, and registers
the kernels with XLA.

Built on first use (a few seconds with g++); any failure (no compiler, not x86-64 with AVX2, FMA and F16C) leaves
the kernels unavailable and the model on XLA's own ops, with the reason in `unavailable_reason()`.
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

_HERE = os.path.dirname(__file__)
SOURCES = tuple(os.path.join(_HERE, name)
                for name in ("cpu_linear.cc", "cpu_packed.cc", "cpu_attention.cc", "cpu_quant.cc", "cpu_probe.cc"))
HEADERS = (os.path.join(_HERE, "parallel.h"),)
TARGET_NAME = "specjax_cpu_linear"
ATTENTION_TARGET_NAME = "specjax_cpu_attention"
TREE_ATTENTION_TARGET_NAME = "specjax_cpu_tree_attention"
QUANT_TARGET_NAME = "specjax_cpu_quant"
PACKED_TARGET_NAME = "specjax_cpu_packed_linear"
_SYMBOLS = {TARGET_NAME: "SpecjaxCpuLinear", ATTENTION_TARGET_NAME: "SpecjaxCpuAttention",
            TREE_ATTENTION_TARGET_NAME: "SpecjaxCpuTreeAttention", QUANT_TARGET_NAME: "SpecjaxCpuQuant",
            PACKED_TARGET_NAME: "SpecjaxCpuPackedLinear"}
FLAGS = ("-O3", "-mavx2", "-mfma", "-mf16c", "-std=c++17", "-shared", "-fPIC", "-w")
_reason: list[str] = []
_library: list[ctypes.CDLL] = []


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset:
  """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
  try:
    with open("/proc/cpuinfo") as f:
      return frozenset(next((line for line in f if line.startswith("flags")), "").split())
  except OSError:
    return frozenset()


def _cpu_has_avx2_fma_f16c() -> bool:
  return {"avx2", "fma", "f16c"} <= cpu_flags()


def has_avx512() -> bool:
  """Whether the packed linear kernel (AVX-512F) runs on this CPU."""
  return "avx512f" in cpu_flags()


def cache_dir() -> str:
  return os.path.expanduser(os.environ.get("SPECJAX_KERNEL_CACHE", "~/.cache/specjax/kernels"))


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
  """What the kernels' library is built from (sources, headers, flags, jaxlib), as 16 hex digits: it names the
  library and keys what is measured on it (`kernels.calibration_cache`)."""
  digest = hashlib.sha256(jaxlib.__version__.encode() + " ".join(FLAGS).encode())
  for name in SOURCES + HEADERS:
    with open(name, "rb") as f:
      digest.update(f.read())
  return digest.hexdigest()[:16]


def _compile(compiler: str) -> str:
  path = os.path.join(cache_dir(), f"cpu_kernels-{source_digest()}.so")
  if os.path.exists(path):
    return path
  os.makedirs(cache_dir(), exist_ok=True)
  fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache_dir())
  os.close(fd)
  try:
    subprocess.run([compiler, *FLAGS, f"-I{jax.ffi.include_dir()}", *SOURCES, "-o", tmp], check=True,
                   capture_output=True, text=True, timeout=300)
    os.replace(tmp, path)  # atomic: a concurrent build or a crash never leaves a half-written library
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  return path


@functools.lru_cache(maxsize=1)
def registered() -> bool:
  """True once the kernels are built, loaded and registered for the CPU platform."""
  if os.environ.get("SPECJAX_CPU_KERNELS", "1") == "0":
    _reason.append("disabled by SPECJAX_CPU_KERNELS=0")
    return False
  if platform.machine().lower() not in ("x86_64", "amd64") or not _cpu_has_avx2_fma_f16c():
    _reason.append("needs an x86-64 CPU with AVX2, FMA and F16C")
    return False
  compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
  if compiler is None:
    _reason.append("no C++ compiler (g++ or clang++) on PATH")
    return False
  try:
    library = ctypes.cdll.LoadLibrary(_compile(compiler))
  except (OSError, subprocess.SubprocessError) as error:
    detail = getattr(error, "stderr", "") or str(error)
    _reason.append(f"building {', '.join(SOURCES)} failed: {detail[-500:]}")
    return False
  for target, symbol in _SYMBOLS.items():
    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(library, symbol)), platform="cpu")
  _library.append(library)
  return True


def library() -> ctypes.CDLL | None:
  """The loaded kernels' library (its plain C entry points, such as the machine probe), or None without kernels."""
  return _library[0] if registered() else None


def unavailable_reason() -> str:
  return "; ".join(_reason)
