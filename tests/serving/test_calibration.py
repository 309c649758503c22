"""`calibration.ServedCosts`: the served steps' times turned into the adaptive policy's round costs."""

import numpy as np
import pytest

from specjax.serving.calibration import ServedCosts

BRANCH_KS = (0, 1, 2, 4)
PRIOR = (1.0, 1.5, 2.0, 3.0)


def test_the_prior_holds_until_the_autoregressive_step_was_served_at_that_bucket():
  costs = ServedCosts()
  np.testing.assert_allclose(costs.relative(4, BRANCH_KS, PRIOR), PRIOR)
  costs.observe(4, 4, seconds=0.9, rounds=3)               # 300 ms per K=4 round, no autoregressive one yet
  np.testing.assert_allclose(costs.relative(4, BRANCH_KS, PRIOR), PRIOR)
  assert costs.stale(4)
  costs.observe(1, 0, seconds=0.1, rounds=4)               # another bucket's step says nothing about this one
  assert costs.stale(4) and not costs.stale(1)


def test_served_ratios_and_unserved_ks_scaled_like_the_served_ones():
  costs = ServedCosts()
  costs.observe(4, 0, seconds=0.4, rounds=4)               # 100 ms
  costs.observe(4, 4, seconds=1.8, rounds=3)               # 600 ms: 6x, twice the prior's 3x
  np.testing.assert_allclose(costs.relative(4, BRANCH_KS, PRIOR), (1.0, 3.0, 4.0, 6.0), rtol=1e-6)
  costs.observe(4, 1, seconds=0.2, rounds=2)               # K=1 as served: 1x (its prior 1.5): scale sqrt(2 / 1.5)
  scale = np.sqrt(2.0 * (1.0 / 1.5))
  np.testing.assert_allclose(costs.relative(4, BRANCH_KS, PRIOR), (1.0, 1.0, 2.0 * scale, 6.0), rtol=1e-5)
  costs.observe(4, 2, seconds=0.05, rounds=1)              # cheaper than a step (noise): never below 1
  assert costs.relative(4, BRANCH_KS, PRIOR)[2] == 1.0
  assert costs.table() == {4: {0: 100.0, 1: 100.0, 2: 50.0, 4: 600.0}}


def test_the_median_of_the_last_steps_and_the_refresh():
  costs = ServedCosts(window=3, refresh_steps=2)
  for ms in (10, 1000, 12, 11):                            # one slow step (a compilation, a pause) is outvoted
    costs.observe(2, 0, seconds=ms / 1e3, rounds=1)
  assert costs.ms(2, 0) == 12.0
  costs.observe(2, 4, seconds=0.1, rounds=0)               # a step that ran no round counts for nothing
  assert costs.ms(2, 4) is None and not costs.stale(2)
  costs.observe(2, 4, seconds=0.1, rounds=2)
  assert not costs.stale(2)
  costs.observe(2, 4, seconds=0.1, rounds=2)               # 2 drafting steps since the autoregressive one
  assert costs.stale(2)
  costs.observe(2, 0, seconds=0.01, rounds=1)
  assert not costs.stale(2)
  costs.clear()
  assert costs.table() == {} and costs.stale(2)


def test_bad_settings():
  with pytest.raises(ValueError, match="window >= 1"):
    ServedCosts(window=0)
  with pytest.raises(ValueError, match="refresh_steps >= 1"):
    ServedCosts(refresh_steps=0)


def test_the_drafting_k_not_yet_served_at_a_bucket():
  costs = ServedCosts()
  assert costs.unserved(2, (0, 1, 2, 4)) == (1, 2, 4)
  costs.observe(2, 0, seconds=0.1, rounds=2)
  costs.observe(2, 2, seconds=0.1, rounds=2)
  costs.observe(4, 4, seconds=0.1, rounds=2)   # another bucket
  costs.observe(2, 1, seconds=0.1, rounds=0)   # a step that ran no round serves nothing
  assert costs.unserved(2, (0, 1, 2, 4)) == (1, 4)
