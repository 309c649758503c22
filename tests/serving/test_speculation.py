"""The serving engine's per-step policy: a step's rounds folded in one compiled call of one shape."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.policy import SpeculationPolicy, update_policy_state
from specjax.serving import speculation
from specjax.serving.speculation import StepPolicy

POLICY = SpeculationPolicy(ks=(1, 2, 4))
COSTS = np.array([1.0, 1.3, 1.6, 2.2], np.float32)


def _round_by_round(step_policy, accepted_RxB, k_R):
  """The estimate folded one round at a time, skipping rounds without an active row (the rule `observe` keeps)."""
  state = step_policy.state
  for accepted_B, k in zip(accepted_RxB, k_R):
    active_B = accepted_B >= 0
    if active_B.any():
      state = update_policy_state(step_policy.stepwise, state, jnp.int32(step_policy.choice[0]), jnp.int32(k),
                                  jnp.asarray(np.maximum(accepted_B, 0)), jnp.asarray(active_B), jnp.asarray(COSTS))
  return state


@pytest.mark.parametrize("accepted_RxB,k_R", [
    (np.array([[4, 2, -1], [1, -1, -1]]), np.array([4, 4])),              # a row done after one round
    (np.array([[0, 0], [3, 4], [-1, -1], [-1, -1]]), np.array([4, 4, 4, 4])),   # the step ended early
    (np.array([[-1], [-1]]), np.array([0, 0])),                           # nothing active: no change
])
def test_a_step_folded_in_one_call_is_the_rounds_folded_one_by_one(accepted_RxB, k_R):
  policy = StepPolicy(POLICY, rounds_per_step=4, rows=8)
  policy.choose(COSTS, tokens_left=100)
  expected = _round_by_round(policy, accepted_RxB, k_R)
  policy.observe(accepted_RxB, k_R)
  for got, want in zip(jax.tree.leaves(policy.state), jax.tree.leaves(expected)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def test_a_step_read_after_the_next_choice_is_folded_at_its_own():
  """A pipelined step's rounds reach `observe` after the next step was chosen (here autoregressive, at other costs):
  they are folded at the branch and costs they ran at, not the last ones."""
  accepted_RxB, k_R = np.array([[1, 0], [1, -1]]), np.array([1, 1])
  policy = StepPolicy(POLICY, rounds_per_step=4, rows=8)
  assert policy.choose(COSTS, tokens_left=100) == 1   # the first step probes the smallest K
  ran_at, expected = policy.choice, _round_by_round(policy, accepted_RxB, k_R)
  assert policy.choose(COSTS * 3, tokens_left=100, measure_ar=True) == 0 and policy.choice[0] != ran_at[0]
  before = policy.state
  policy.observe(accepted_RxB, k_R, ran_at)
  for got, want in zip(jax.tree.leaves(policy.state), jax.tree.leaves(expected)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
  policy.state = before
  policy.observe(accepted_RxB, k_R)   # at the last choice: another estimate
  assert any(not np.allclose(np.asarray(a), np.asarray(b))
             for a, b in zip(jax.tree.leaves(policy.state), jax.tree.leaves(expected)))


def test_every_load_and_every_new_step_policy_share_one_compiled_update():
  """A compiled update per active-row count cost about 0.2 s the first time each count was served."""
  policy = StepPolicy(POLICY, rounds_per_step=4, rows=16)
  policy.choose(COSTS, tokens_left=50)
  policy.observe(np.full((4, 1), 2), np.full((4,), 4))
  compiled = speculation._fold_step._cache_size()
  for rows in (2, 3, 7, 16):
    policy.observe(np.full((3, rows), 1), np.full((3,), 4))
  again = StepPolicy(POLICY, rounds_per_step=4, rows=16)   # what a warmup makes
  again.choose(COSTS, tokens_left=50)
  again.observe(np.full((2, 5), 0), np.full((2,), 1))
  assert speculation._fold_step._cache_size() == compiled


def test_a_step_wider_than_the_policy_was_made_for_is_refused():
  policy = StepPolicy(POLICY, rounds_per_step=2, rows=4)
  policy.choose(COSTS, tokens_left=10)
  with pytest.raises(ValueError, match="at most 2 rounds of 4 rows"):
    policy.observe(np.zeros((3, 4), np.int32), np.ones((3,), np.int32))
