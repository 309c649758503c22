"""Prefill-shaped target passes on SmolLM2-135M: tokens per second of the teacher-forcing feature pass (what drafter
training reads, `specjax.training.data.target_pass`) at several batch x length shapes, against the FLOPs the
machine sustains on the same shapes' largest matmul (XLA's dot, float32).

  python docs/diagnostics/prefill_throughput.py [BATCHxLEN ...]
"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import specjax
from specjax.cli import model_from_source
from specjax.engine import features_program
from specjax.spec import TargetSpec

SHAPES = ("1x64", "1x256", "1x512", "4x128", "8x176", "4x512")
REPEATS = 3


def best_seconds(fn, *args) -> float:
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(REPEATS):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return min(times)


def main(shapes):
  specjax.enable_compilation_cache()
  target = model_from_source("smollm2-135m", "")
  config = target.config
  # the pass multiplies by every weight but the embedding table (it computes no logits)
  n_params = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(target.params)) - config.vocab_size * config.d_model
  spec = TargetSpec(graphdef=target.graphdef)
  for shape in shapes:
    batch, length = map(int, shape.split("x"))
    tokens = jnp.asarray(np.random.default_rng(0).integers(1, config.vocab_size, (batch, length)), jnp.int32)
    seconds = best_seconds(lambda t: features_program(target.params, t, spec=spec, layer_ids=(2, 15, 27)).hidden_BxTxD,
                           tokens)
    x = jnp.ones((batch * length, config.d_model), jnp.float32)
    w = jnp.ones((config.d_model, config.ffn_dim), jnp.float32)
    dot = best_seconds(jax.jit(jnp.dot), x, w)
    rate = batch * length / seconds
    print(f"{shape:>6}: {rate:7.0f} tokens/s ({60 * rate:8.0f} a minute), {2 * n_params * rate / 1e9:5.1f} GFLOP/s "
          f"on the weights; XLA's dot [{batch * length}, {config.d_model}] x [{config.d_model}, {config.ffn_dim}] "
          f"{2 * batch * length * config.d_model * config.ffn_dim / dot / 1e9:5.1f} GFLOP/s", flush=True)


if __name__ == "__main__":
  main(sys.argv[1:] or SHAPES)
