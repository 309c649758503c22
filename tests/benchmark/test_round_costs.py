"""A round's measured cost (`specjax.benchmark.round_costs`) on tiny random models: the verification curve, a
drafter's call by rows, the residual a round, and clear errors for a drafter whose levels cannot be timed."""

import pytest

from specjax import ModelConfig, drafters, init_model
from specjax.benchmark import round_costs
from specjax.drafters.feature_head import FeatureHead
from specjax.drafters.medusa import MedusaHeads
from specjax.trees import StaticTree

TINY = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=128)


@pytest.fixture(scope="module")
def target():
  return init_model(TINY, seed=1)


def test_verify_curve_times_each_tree_size(target):
  curve = round_costs.verify_curve(target, (3, 1), width=2, filled=20, cache_size=64, calls=2)
  assert sorted(curve) == [1, 2, 4] and curve[1] == 1.0
  assert all(ratio > 0 for ratio in curve.values())
  seen = []
  hooked = round_costs.verify_curve(target, (1,), width=2, filled=20, cache_size=64, calls=2,
                                    each=lambda positions, measure: seen.append((positions, measure())) or 7.0)
  assert hooked == {1: 1.0, 2: 7.0} and [p for p, _ in seen] == [2] and seen[0][1] > 0


@pytest.mark.parametrize("make", [lambda t: drafters.DraftModel(t), lambda t: FeatureHead.create(t)],
                         ids=["draft_model", "feature_head"])
def test_draft_costs_by_rows(target, make):
  draft = round_costs.draft_costs(target, make(target), filled=20, calls=2)
  assert draft["draft_step"] > 0 and draft["step_ms"] > 0
  assert sorted(draft["draft_by_width"]) == list(round_costs.DRAFT_WIDTHS) and draft["draft_by_width"][1] == 1.0


def test_a_one_call_drafter_costs_nothing_by_level(target):
  """Prompt lookup and Medusa draft the whole tree from one call at the root: its cost is in the residual."""
  for drafter in (drafters.PromptLookup(), MedusaHeads.create(target)):
    assert not round_costs.times_its_level(drafter)
    draft = round_costs.draft_costs(target, drafter, filled=20, calls=2)
    assert draft["draft_step"] == 0.0 and draft["draft_by_width"] is None and draft["step_ms"] > 0
    with pytest.raises(ValueError, match="does not draft a tree level by level"):
      round_costs.draft_level(drafter, 2, 20)


def test_round_cost_takes_the_timed_rounds_residual():
  verify = {1: 1.0, 3: 1.2, 7: 1.6}
  draft = {"draft_step": 0.1, "draft_by_width": {1: 1.0, 2: 1.5, 4: 2.0}, "step_ms": 10.0}
  comb = StaticTree(((0,), (1,), (0, 0), (0, 1), (0, 0, 0), (0, 0, 1)))   # 6 nodes, draft calls of 1, 1, 1 rows
  parts = round_costs.round_cost(verify, draft)
  assert parts.overhead == 0.0 and parts(comb) == pytest.approx(3 * 0.1 + 1.6)
  timed = round_costs.round_cost(verify, draft, comb, timed_round_ms=25.0)
  assert timed.overhead == pytest.approx(2.5 - 1.9) and timed(comb) == pytest.approx(2.5)
  assert timed(StaticTree.chain(2)) == pytest.approx(2 * 0.1 + 1.2 + 0.6)
  assert round_costs.round_cost(verify, draft, comb, timed_round_ms=5.0).overhead == 0.0   # faster than its parts


def test_a_dip_in_the_verification_curve_is_noise():
  assert round_costs.never_cheaper({1: 1.0, 5: 1.1, 3: 1.2, 9: 1.3}) == {1: 1.0, 3: 1.2, 5: 1.2, 9: 1.3}
