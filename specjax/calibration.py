"""Measures what one round costs at each of a policy's K (relative to an autoregressive step) on the real
program, inputs and machine: the cost side of `SpeculationPolicy`'s choice.

Each branch is forced for a short generation of the same compiled program (same shapes, so nothing recompiles);
the time of a zero-round call (prefill, drafter prefill, dispatch) is subtracted before dividing by rounds.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.engine import generate_program

CALIBRATION_TOKENS = 12


def _timed(run, max_new: int, forced: int, n_branches: int):
  start = time.perf_counter()
  state = run(max_new, (jnp.ones((n_branches,), jnp.float32), jnp.int32(forced)))
  rounds = int(jax.device_get(state.round))
  return time.perf_counter() - start, rounds


def calibrate_round_cost(target_params, drafter_params, host_inputs, *, policy, repeats: int = 2, **program):
  """Round cost per branch of `policy` (autoregressive = 1.0) as a float32 array.

  host_inputs: (tokens_BxS, prompt_len_B) numpy arrays at the shapes the real calls use; program: the static
  keyword arguments of `engine.generate_program` (graphdef, drafter, sampling, eos_ids, prompt_bucket, mesh).
  """
  tokens_BxS, prompt_len_B = host_inputs
  n_branches = len(policy.branch_ks)

  def run(max_new, policy_inputs):
    max_new_B = np.full(prompt_len_B.shape, max_new, np.int32)
    state = generate_program(target_params, drafter_params, jnp.asarray(tokens_BxS), jnp.asarray(prompt_len_B),
                             jnp.asarray(max_new_B), jax.random.key(0), k=policy, policy_inputs=policy_inputs,
                             **program)
    return jax.block_until_ready(state)

  run(CALIBRATION_TOKENS, (jnp.ones((n_branches,), jnp.float32), jnp.int32(0)))  # compiles; not timed
  fixed = min(_timed(run, 1, 0, n_branches)[0] for _ in range(repeats))
  per_round = []
  for branch in range(n_branches):
    best = float("inf")
    for _ in range(repeats):
      wall, rounds = _timed(run, CALIBRATION_TOKENS, branch, n_branches)
      best = min(best, max(wall - fixed, 1e-6) / max(rounds, 1))
    per_round.append(best)
  return np.asarray(per_round, np.float32) / per_round[0]
