"""The packed kernel's calibrated `min_rows`, kept across processes.

`packed.packed_params` times both kernels over a model's weights (about 8 s for SmolLM2-135M). The answer depends on
the CPU, the kernels' library and the weights' shapes, so it is stored in the kernel cache under a key of those and
read back by later processes; $SPECJAX_PACKED_RECALIBRATE=1 times again (and stores the new answer).
"""

import hashlib
import json
import os
import tempfile

import jax

from specjax.kernels import build

RECALIBRATE_ENV = "SPECJAX_PACKED_RECALIBRATE"
FILE_NAME = "packed_min_rows.json"


def _path() -> str:
  return os.path.join(build.cache_dir(), FILE_NAME)


def _cpu_name() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
  except OSError:
    return ""


def cache_key(weight_shapes, ladder) -> str:
  """A digest of what the timing depends on: the CPU, the kernels' library, jax, the weights' shapes and the row
  counts timed."""
  what = {"cpu": _cpu_name(), "flags": sorted(build.cpu_flags()), "kernels": build.source_digest(),
          "jax": jax.__version__, "weights": sorted(map(list, weight_shapes)), "ladder": list(ladder)}
  return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:24]


def _entries() -> dict:
  try:
    with open(_path()) as f:
      entries = json.load(f)
  except (OSError, ValueError):  # none yet, or unreadable: time again
    return {}
  return entries if isinstance(entries, dict) else {}


def load(key: str) -> int | None:
  """The stored min_rows for `key`, or None (none stored, an unreadable file, or $SPECJAX_PACKED_RECALIBRATE)."""
  if os.environ.get(RECALIBRATE_ENV, "").strip() not in ("", "0"):
    return None
  entry = _entries().get(key)
  value = entry.get("min_rows") if isinstance(entry, dict) else None
  return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def store(key: str, min_rows: int, seconds_by_rows: dict) -> None:
  """Adds `key`'s answer and its timings (ms, plain / packed) to the file, written whole then renamed into place so
  that a crash or a concurrent writer never leaves half a file; a cache that cannot be written is skipped."""
  entries = _entries()
  entries[key] = {"min_rows": int(min_rows),
                  "ms_plain_packed": {str(r): [round(1e3 * a, 3), round(1e3 * b, 3)] for r, (a, b) in
                                      seconds_by_rows.items()}}
  try:
    os.makedirs(build.cache_dir(), exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".json", dir=build.cache_dir())
  except OSError:
    return
  try:
    with os.fdopen(fd, "w") as f:
      json.dump(entries, f, indent=1, sort_keys=True)
    os.replace(tmp, _path())
  except OSError:
    pass
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
