"""The machine's memory-bandwidth bound on decoding, measured in the benchmark's own process.

Decoding one token reads every parameter (and the filled KV cache) once, so no implementation on this
machine beats bandwidth / bytes-per-step. Bandwidth is measured as a STREAM-style copy (read + write bytes
per second) of a buffer much larger than the caches, with the same XLA runtime that runs the model.
"""

import functools
import time

import jax
import jax.numpy as jnp


@functools.lru_cache(maxsize=1)
def copy_bandwidth_gbs(n_bytes: int = 512 * 2**20, repeats: int = 5) -> float:
  """Best of `repeats` copies of an n_bytes float32 buffer: (read + written bytes) / second / 1e9."""
  x = jnp.ones((n_bytes // 4,), jnp.float32)
  # Donated, so the output reuses the input's pages: no first-touch page faults inside the timing.
  copy = jax.jit(lambda a: a * 1.0000001, donate_argnums=0)
  x = copy(x).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    x = copy(x).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2 * n_bytes / best / 1e9


def decode_bytes_per_step(param_bytes: int, config, batch: int, mean_context: float) -> float:
  """Parameters once per step plus each row's K and V cache up to its mean filled length."""
  dtype_bytes = jnp.dtype(config.dtype).itemsize
  cache_per_row = 2 * config.n_layers * mean_context * config.n_kv_heads * config.head_dim_ * dtype_bytes
  return param_bytes + batch * cache_per_row


def bound_tokens_per_s(param_bytes: int, config, batch: int, mean_context: float, bandwidth_gbs: float) -> float:
  """Tokens/s of an implementation that only moves the bytes it must, at the measured bandwidth."""
  return batch * bandwidth_gbs * 1e9 / decode_bytes_per_step(param_bytes, config, batch, mean_context)
