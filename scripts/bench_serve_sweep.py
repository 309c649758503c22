"""Serving sweep: python scripts/bench_serve_sweep.py --config=configs/bench_serve_sweep.py [--config.key=value ...]

Starts each system's server in turn (specjax's scripts/serve.py with overrides, llama.cpp's llama-server), loads it
at every concurrency and request rate with the load benchmark (scripts/bench_serve.py's runner), and writes
results.json, report.md and *.png into --config.output_dir. All logic is in specjax.benchmark.serving.sweep.
"""

import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # configs/ and an uninstalled specjax

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from specjax.benchmark.serving import sweep  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "sweep config file (configs/bench_serve_sweep.py)",
                                          lock_config=True)


def main(argv):
  del argv
  logging.getLogger("httpx").setLevel(logging.WARNING)   # not a line per request
  start = time.perf_counter()
  results = sweep.run_sweep(_CONFIG.value, log=lambda line: print(line, flush=True))
  failed = ", ".join(name for name, info in results["systems"].items() if info["error"])
  print(f"{len(results['cells'])} cells, {time.perf_counter() - start:.0f} s -> {_CONFIG.value.output_dir}/report.md"
        + (f" (failed: {failed})" if failed else ""))


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])
  app.run(main)
