"""Benchmark: python scripts/benchmark.py --config=configs/bench_cpu.py [--config.key=value ...]

Writes results.json, report.md and *.png plots into --config.output_dir. All logic is in specjax.benchmark.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # configs/ and an uninstalled specjax

from absl import app, flags, logging
from ml_collections import config_flags

from specjax import distributed

distributed.define_flags()  # --coordinator_address etc.; auto-detected on a TPU VM slice

_CONFIG = config_flags.DEFINE_config_file("config", None, "benchmark config file (configs/bench_*.py)",
                                          lock_config=True)


def main(argv):
  del argv
  distributed.initialize_from_flags()
  import jax
  from specjax.benchmark import plan, report, runner
  config = _CONFIG.value
  settings = plan.validate_config(config)  # clear errors before any model work
  if config.get("compilation_cache_dir"):
    jax.config.update("jax_compilation_cache_dir", os.path.expanduser(config.compilation_cache_dir))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
  start = time.perf_counter()
  records = runner.run_benchmark(config)
  report.write_outputs(records, settings, config.output_dir)
  logging.info("wrote %d records to %s in %.0f s", len(records), config.output_dir, time.perf_counter() - start)
  print(f"{len(records)} records, {time.perf_counter() - start:.0f} s -> {config.output_dir}/report.md")


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])
  app.run(main)
