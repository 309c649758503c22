"""JAX's persistent compilation cache, so that a second run of the same command does not recompile."""

import os

import jax

DEFAULT_DIR = os.path.join(os.path.expanduser("~"), ".cache", "specjax", "jax")


def enable_compilation_cache(directory: str | None = None) -> str:
  directory = directory or os.environ.get("SPECJAX_COMPILATION_CACHE", DEFAULT_DIR)
  os.makedirs(directory, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", directory)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
  return directory
