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


_choose = jax.jit(choose_branch, static_argnums=0)


@functools.partial(jax.jit, static_argnums=0)
def _fold_step(policy: SpeculationPolicy, state, branch, accepted_RxS, k_R, round_cost_N):
  """A step's rounds folded into the estimate in one call; a round without an active row (-1 everywhere: the step
  ended early, or padding) leaves the state as it was."""
  def fold(state, round_inputs):
    accepted_S, k = round_inputs
    active_S = accepted_S >= 0
    new = update_policy_state(policy, state, branch, k, jnp.maximum(accepted_S, 0), active_S, round_cost_N)
    return jax.tree.map(lambda a, b: jnp.where(active_S.any(), a, b), new, state), None

  return jax.lax.scan(fold, state, (accepted_RxS, k_R))[0]


class StepPolicy:
  """The policy state across steps; `choose` gives a step's K, `observe` folds its rounds in. A probe lasts a
  step of `rounds_per_step` rounds, so the probe budget and spacing (counted in rounds) are scaled by it: failed
  probes still cost at most `probe_budget` of the autoregressive time. Each step's rounds are padded to
  `rounds_per_step` x `rows` (the engine's slots), so the compiled update has one shape whatever the load: a shape
  per active-row count cost a compilation (about 0.2 s) the first time each count was served, mid-burst. The
  compiled functions take the policy as a static argument, so a new StepPolicy (each warmup) reuses them."""

  def __init__(self, policy: SpeculationPolicy, rounds_per_step: int = 1, rows: int = 1):
    self.policy = policy
    self.stepwise = dataclasses.replace(policy, probe_budget=policy.probe_budget / rounds_per_step,
                                        probe_interval=policy.probe_interval * rounds_per_step,
                                        max_probe_interval=policy.max_probe_interval * rounds_per_step)
    self.state = init_policy_state(self.stepwise)
    self.rounds_per_step, self.rows = rounds_per_step, rows
    self.choice = (0, None)   # the last choice's (branch, round costs): what `observe` folds a step's rounds at
    self._observed = 0        # the branch of the last step observed

  def choose(self, round_cost_N, tokens_left: int, measure_ar: bool = False, unserved_ks: tuple = ()) -> int:
    """K of the next step at these round costs (one per branch) with `tokens_left` the most any active row still
    needs; measure_ar: step autoregressively instead of drafting, so its served cost is measured again;
    unserved_ks: drafting K whose served cost is unknown, the first of which a step that would draft at the K of
    the last step observed serves instead (once served, its own cost replaces a prior that a served K's ratio only
    scales: a warmup that misjudged K=4 against K=2 would otherwise keep K=2 for good). A probe never explores."""
    inputs = PolicyInputs.measured(round_cost_N)
    # a probe (K_min while autoregression is best) lasts the whole step: R rounds, not one as in `generate`.
    # Until a round has measured the drafter, the first step that could pay probes (as round 0 does in `generate`)
    # whatever this request has left: the acceptance it learns serves every later request, not this one alone.
    measured = bool(self.state.measured)
    branch = int(_choose(self.stepwise, self.state, inputs, self.state.rounds if measured else jnp.int32(0),
                         jnp.int32(tokens_left if measured else np.iinfo(np.int32).max)))
    if measure_ar:
      branch = 0
    elif unserved_ks and branch and branch == self._observed:
      branch = self.policy.branch_ks.index(unserved_ks[0])
    self.choice = (branch, inputs.round_cost_N)
    return self.policy.branch_ks[branch]

  def observe(self, accepted_RxB, k_R, choice: tuple | None = None) -> None:
    """The step's rounds (accepted drafts per round and row, -1 where the row was done or inactive), folded in at
    the step's own `choice` (default: the last one; a pipelined step is read after the next one's choice)."""
    accepted_RxB, k_R = np.asarray(accepted_RxB), np.asarray(k_R)
    rounds, rows = accepted_RxB.shape
    if rounds > self.rounds_per_step or rows > self.rows:
      raise ValueError(f"a step of {rounds} rounds over {rows} rows; this policy folds at most {self.rounds_per_step} "
                       f"rounds of {self.rows} rows")
    padded_RxS = np.full((self.rounds_per_step, self.rows), -1, np.int32)
    padded_RxS[:rounds, :rows] = accepted_RxB
    padded_R = np.zeros((self.rounds_per_step,), np.int32)
    padded_R[:rounds] = k_R
    branch, costs = self.choice if choice is None else choice
    self._observed = branch
    self.state = _fold_step(self.stepwise, self.state, jnp.int32(branch), padded_RxS, padded_R, costs)
