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

from specjax.engine import decode_program, prefill_for, with_budget
from specjax.policy import PolicyInputs
from specjax.spec import DecodeSpec

CALIBRATION_TOKENS = 12


class Calibration:
  """Round costs measured once per (spec, batch shape) and kept for later calls: pass one instance to every
  `generate` call (or benchmark cell) that should reuse them. `costs` seeds it with known costs."""

  def __init__(self, repeats: int = 3, costs: dict | None = None):
    self.repeats = repeats
    self._costs = dict(costs or {})

  def round_costs(self, target_params, drafter_params, tokens_BxS, prompt_len_B, spec: DecodeSpec) -> np.ndarray:
    """Cost of each branch of spec.k (autoregressive = 1.0), measured on these host arrays' shapes."""
    if not spec.adaptive:
      raise ValueError(f"calibration measures an adaptive spec's branches; this spec has a fixed k={spec.k}")
    key = (spec, np.shape(tokens_BxS))
    if key not in self._costs:
      self._costs[key] = measure_round_costs(target_params, drafter_params, tokens_BxS, prompt_len_B, spec,
                                             self.repeats)
    return self._costs[key]

  def policy_inputs(self, target_params, drafter_params, tokens_BxS, prompt_len_B, spec: DecodeSpec):
    """The decode program's PolicyInputs for `spec` (None when K is fixed)."""
    if not spec.adaptive:
      return None
    return PolicyInputs.measured(self.round_costs(target_params, drafter_params, tokens_BxS, prompt_len_B, spec))


def measure_round_costs(target_params, drafter_params, tokens_BxS, prompt_len_B, spec: DecodeSpec,
                        repeats: int = 3) -> np.ndarray:
  """Round cost per branch of `spec.k` (autoregressive = 1.0) as a float32 array, timed on arrays shaped like
  (tokens_BxS, prompt_len_B)."""
  n_branches = len(spec.k.branch_ks)
  prompt_len = jnp.asarray(prompt_len_B)
  budget_B = jnp.full(np.shape(prompt_len_B), CALIBRATION_TOKENS, jnp.int32)
  prefilled = jax.block_until_ready(prefill_for(target_params, jnp.asarray(tokens_BxS), prompt_len, budget_B,
                                                jax.random.key(0), spec=spec))

  def timed(max_new: int, forced: int):
    budget = jnp.full(np.shape(prompt_len_B), max_new, jnp.int32)
    state = with_budget(jax.tree.map(jnp.copy, prefilled), budget)  # the decode program donates its state
    jax.block_until_ready((state, budget))
    start = time.perf_counter()
    state = decode_program(target_params, drafter_params, state, prompt_len, budget,
                           PolicyInputs.measured(jnp.ones((n_branches,)), forced), spec=spec)
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
