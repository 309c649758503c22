"""The serving engine's adaptive K: `specjax.policy`'s rule, applied on the host once per step.

Each step runs one fixed-K program (K in the policy's branches; at 0 autoregressive, the drafter left behind where
it can catch up later), picked by `choose_branch` from the acceptance estimate and the round costs at the current
row bucket (measured at warmup, then as served: `specjax.serving.calibration`); the step's rounds are folded into
the estimate by `update_policy_state`, round by round, as the compiled adaptive loop of `generate` does. Deciding
per step instead of per round keeps every step a plain fixed-K program: a `lax.switch` over K inside the loop costs
a K=4 round of SmolLM2 about 50 ms more at max_model_len 2048 (`docs/diagnostics/serving_step_cost.py`)."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from specjax.policy import PolicyInputs, SpeculationPolicy, choose_branch, init_policy_state, update_policy_state


class StepPolicy:
  """The policy state across steps; `choose` gives a step's K, `observe` folds its rounds in. A probe lasts a
  step of `rounds_per_step` rounds, so the probe budget and spacing (counted in rounds) are scaled by it: failed
  probes still cost at most `probe_budget` of the autoregressive time."""

  def __init__(self, policy: SpeculationPolicy, rounds_per_step: int = 1):
    self.policy = policy
    stepwise = dataclasses.replace(policy, probe_budget=policy.probe_budget / rounds_per_step,
                                   probe_interval=policy.probe_interval * rounds_per_step,
                                   max_probe_interval=policy.max_probe_interval * rounds_per_step)
    self.state = init_policy_state(stepwise)
    self._choose = jax.jit(functools.partial(choose_branch, stepwise))
    self._update = jax.jit(functools.partial(update_policy_state, stepwise))
    self._branch, self._costs = 0, None   # the last step's branch and round costs (what `observe` folds in)

  def choose(self, round_cost_N, tokens_left: int, measure_ar: bool = False) -> int:
    """K of the next step at these round costs (one per branch) with `tokens_left` the most any active row still
    needs; measure_ar: step autoregressively instead of drafting, so its served cost is measured again."""
    inputs = PolicyInputs.measured(round_cost_N)
    self._costs = inputs.round_cost_N
    # a probe (K_min while autoregression is best) lasts the whole step: R rounds, not one as in `generate`.
    # Until a round has measured the drafter, the first step that could pay probes (as round 0 does in `generate`)
    # whatever this request has left: the acceptance it learns serves every later request, not this one alone.
    measured = bool(self.state.measured)
    self._branch = int(self._choose(self.state, inputs, self.state.rounds if measured else jnp.int32(0),
                                    jnp.int32(tokens_left) if measured else None))
    if measure_ar:
      self._branch = 0
    return self.policy.branch_ks[self._branch]

  def observe(self, accepted_RxB, k_R) -> None:
    """The step's rounds (accepted drafts per round and row, -1 where the row was done or inactive)."""
    for accepted_B, k in zip(np.asarray(accepted_RxB), np.asarray(k_R)):
      active_B = accepted_B >= 0
      if active_B.any():
        self.state = self._update(self.state, jnp.int32(self._branch), jnp.int32(k), jnp.asarray(np.maximum(
            accepted_B, 0)), jnp.asarray(active_B), self._costs)
