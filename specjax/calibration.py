"""Measures what one round costs at each of a policy's K (relative to an autoregressive step) on the real
program, inputs and machine: the cost side of `SpeculationPolicy`'s choice.

Each branch is forced for a short generation of the same compiled decode program (same shapes, so nothing
recompiles). Only the decode program is timed, from one prefilled state: the prefill (seconds at batch 16, and
noisy) would otherwise swamp the rounds. The time of a zero-round decode (the drafter's prefill, dispatch) is
subtracted before dividing by rounds.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax.engine import decode_program, prefill_for

CALIBRATION_TOKENS = 12


def calibrate_round_cost(target_params, drafter_params, host_inputs, *, policy, repeats: int = 3, **program):
  """Round cost per branch of `policy` (autoregressive = 1.0) as a float32 array.

  host_inputs: (tokens_BxS, prompt_len_B) numpy arrays at the shapes the real calls use; program: the static
  keyword arguments of `engine.generate_program` (graphdef, drafter, sampling, eos_ids, prompt_bucket, mesh).
  """
  tokens_BxS, prompt_len_B = host_inputs
  n_branches = len(policy.branch_ks)
  prompt_len = jnp.asarray(prompt_len_B)
  budget_B = jnp.full(prompt_len_B.shape, CALIBRATION_TOKENS, jnp.int32)
  prefilled = jax.block_until_ready(prefill_for(target_params, jnp.asarray(tokens_BxS), prompt_len, budget_B,
                                                jax.random.key(0), **program))

  def timed(max_new: int, forced: int):
    state = jax.tree.map(jnp.copy, prefilled)  # the decode program donates its state
    budget = jnp.full(prompt_len_B.shape, max_new, jnp.int32)
    # As the prefill marks it for this budget: a one-token budget is done before any round (the zero-round call).
    state = state.replace(done_B=state.done_B | (budget <= state.n_new_B))
    jax.block_until_ready((state, budget))
    start = time.perf_counter()
    state = decode_program(target_params, drafter_params, state, prompt_len, budget,
                           (jnp.ones((n_branches,), jnp.float32), jnp.int32(forced)), k=policy, **program)
    rounds = int(jax.device_get(state.round))
    return time.perf_counter() - start, rounds

  timed(CALIBRATION_TOKENS, 0)  # compiles; not timed
  fixed = min(timed(1, 0)[0] for _ in range(repeats))
  per_round = []
  for branch in range(n_branches):
    best = float("inf")
    for _ in range(repeats):
      wall, rounds = timed(CALIBRATION_TOKENS, branch)
      best = min(best, max(wall - fixed, 1e-6) / max(rounds, 1))
    per_round.append(best)
  return ordered_costs(np.asarray(per_round) / per_round[0])


def ordered_costs(relative_N) -> np.ndarray:
  """Timing noise removed where it contradicts the work done: a round that verifies more positions (and drafts
  more) costs at least as much as one with fewer, so costs are raised to at least 1 and to non-decreasing in K."""
  return np.maximum.accumulate(np.maximum(np.asarray(relative_N, np.float64), 1.0)).astype(np.float32)
