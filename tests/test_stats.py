"""One statistics definition: `stats.summarize` (result.stats), `metrics.summarize_calls` (the benchmark) and the
adaptive policy's acceptance estimate agree on the same records, and each figure matches a value worked by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import stats
from specjax.benchmark import metrics
from specjax.policy import SpeculationPolicy, init_policy_state, update_policy_state

# Four rounds, batch 3, K varying per round as under the adaptive policy (round 2 is autoregressive, K = 0);
# -1 marks an inactive row.
ACCEPTED_RxB = np.array([[2, 0, 1],     # K = 2
                         [3, 1, -1],    # K = 3
                         [0, 0, -1],    # K = 0
                         [1, -1, -1]])  # K = 3
K_R = np.array([2, 3, 0, 3])
# Active row-rounds, round-major: accepted 2 0 1 3 1 0 0 1 (sum 8) with K 2 2 2 3 3 0 0 3 (sum 15); tested
# min(n + 1, K): 2 1 2 3 2 0 0 2 (sum 12); bonus (n = K > 0): 2 of 8; correction (n < K): 4 of 8.
# Per position (accepted at i / tested at i): i=1: 5 / 6, i=2: 2 / 5, i=3: 1 / 1 (tested 6 + 5 + 1 = 12).
BY_HAND = dict(rounds=4, k=3, accepted_per_round=[[2, 3, 0, 1], [0, 1, 0], [1]], mean_accepted_per_round=1.0,
               mean_tokens_per_round=2.0, acceptance_rate=8 / 15, acceptance_rate_per_position=[5 / 6, 2 / 5, 1.0],
               bonus_rate=0.25, correction_rate=0.5, alpha=8 / 12, mean_k=15 / 8)
# The policy's observed alpha of each round alone: 3 / 5, 4 / 5, none (autoregressive: the prior stays), 1 / 2.
ROUND_ALPHA = [3 / 5, 4 / 5, None, 1 / 2]


def _call(accepted_RxB, k_R, k, new_tokens):
  return {"wall_s": 1.0, "first_token_s": 0.1, "new_tokens": new_tokens, "accepted": np.asarray(accepted_RxB).tolist(),
          "k": k, "k_R": None if k_R is None else np.asarray(k_R).tolist()}


def _policy_alpha(accepted_B, k, prior=0.25):
  """The policy's estimate after one round with smoothing 1: that round's observed alpha (the prior if none)."""
  policy = SpeculationPolicy(ks=(1, 2, 3, 4), smoothing=1.0, prior_alpha=prior)
  accepted_B = jnp.asarray(accepted_B, jnp.int32)
  state = update_policy_state(policy, init_policy_state(policy), jnp.int32(k > 0), jnp.int32(k),
                              jnp.maximum(accepted_B, 0), accepted_B >= 0)  # as the engine passes them
  return float(state.alpha)


def test_tested_drafts_is_min_of_accepted_plus_one_and_k_on_numpy_and_in_jit():
  n, k = np.array([0, 1, 2, 3, 0, 0]), np.array([3, 3, 3, 3, 1, 0])
  expected = [1, 2, 3, 3, 1, 0]
  assert stats.tested_drafts(n, k).tolist() == expected
  assert jax.jit(stats.tested_drafts)(jnp.asarray(n), jnp.asarray(k)).tolist() == expected
  assert jax.jit(stats.tested_drafts)(jnp.asarray(n[:4]), jnp.int32(3)).tolist() == expected[:4]
  assert stats.tested_drafts(2, 4) == 3 and stats.tested_drafts(4, 4) == 4


def test_figures_by_hand():
  accepted_N, k_N = stats.active_rounds(ACCEPTED_RxB, K_R)
  assert accepted_N.tolist() == [2, 0, 1, 3, 1, 0, 0, 1] and k_N.tolist() == [2, 2, 2, 3, 3, 0, 0, 3]
  assert stats.active_row_rounds(accepted_N) == 8 and stats.accepted_drafts(accepted_N) == 8
  assert stats.proposed_drafts(k_N) == 15 and stats.total_tested_drafts(accepted_N, k_N) == 12
  assert stats.alpha(accepted_N, k_N) == pytest.approx(2 / 3)
  assert stats.acceptance_per_position(accepted_N, k_N, 3) == pytest.approx([5 / 6, 2 / 5, 1.0])


def test_stats_metrics_and_policy_agree():
  result = stats.summarize(ACCEPTED_RxB, [9, 5, 2], 4, 3, k_R=K_R).as_dict()
  for name, value in BY_HAND.items():
    assert result[name] == (value if name == "accepted_per_round" else pytest.approx(value)), name
  summary = metrics.summarize_calls([_call(ACCEPTED_RxB, K_R, 3, [9, 5, 2])], 3)
  assert summary["tokens_per_round"] == pytest.approx(result["mean_tokens_per_round"])
  assert summary["acceptance_rate"] == pytest.approx(result["acceptance_rate"])
  assert summary["alpha"] == pytest.approx(result["alpha"])
  assert summary["mean_k"] == pytest.approx(result["mean_k"])
  assert summary["rounds"] == result["rounds"] and summary["new_tokens"] == 16
  for r, expected in enumerate(ROUND_ALPHA):
    one_round = stats.alpha(*stats.active_rounds(ACCEPTED_RxB[r:r + 1], K_R[r:r + 1]))
    assert one_round == (None if expected is None else pytest.approx(expected))
    assert _policy_alpha(ACCEPTED_RxB[r], int(K_R[r])) == pytest.approx(0.25 if expected is None else expected)


def test_metrics_pool_calls_of_different_batch_sizes():
  # A second call, batch 1, fixed K = 2 (no k_R): accepted 1, 2; tested 2, 2. Pooled: accepted 11 of 19 proposed,
  # 16 tested, over 10 active row-rounds.
  calls = [_call(ACCEPTED_RxB, K_R, 3, [9, 5, 2]), _call([[1], [2]], None, 2, [5])]
  assert metrics.tokens_per_round(calls) == pytest.approx(21 / 10)
  assert metrics.acceptance_rate(calls, 2) == pytest.approx(11 / 19)
  assert metrics.alpha_estimate(calls, 2) == pytest.approx(11 / 16)
  assert metrics.mean_k(calls, 2) == pytest.approx(19 / 10)
  accepted_N, k_N = metrics.pooled_rounds(calls, 2)
  assert stats.alpha(accepted_N, k_N) == metrics.alpha_estimate(calls, 2)


@pytest.mark.parametrize("fill", [0, 4], ids=["all_rejected", "all_accepted"])
def test_all_rejected_and_all_accepted(fill):
  accepted_RxB, k = np.full((2, 2), fill), 4
  result = stats.summarize(accepted_RxB, [3, 3], 2, k)
  rate = fill / k
  assert result.mean_tokens_per_round == fill + 1 and result.mean_accepted_per_round == fill
  assert result.acceptance_rate == rate and result.alpha == rate and result.mean_k == 4.0
  assert result.bonus_rate == rate and result.correction_rate == 1.0 - rate
  # all rejected: position 1 tested 4 times, accepted never; later positions never tested (0.0 in result.stats)
  assert result.acceptance_rate_per_position == ([1.0] * 4 if fill else [0.0] * 4)
  summary = metrics.summarize_calls([_call(accepted_RxB, None, k, [3, 3])], k)
  assert (summary["tokens_per_round"], summary["acceptance_rate"], summary["alpha"], summary["mean_k"]) == (
      fill + 1, rate, rate, 4.0)
  assert _policy_alpha(accepted_RxB[0], k) == rate


def test_no_rounds_and_autoregressive():
  # No rounds: the engine's record is all -1 (or empty); every figure is undefined (None; 0.0 in result.stats).
  for accepted_RxB, rounds in ((np.full((5, 2), -1), 0), (np.zeros((0, 2), int), 0), (np.full((3, 2), -1), 3)):
    result = stats.summarize(accepted_RxB, [1, 1], rounds, 4)
    assert result.accepted_per_round == [[], []] and result.acceptance_rate_per_position == [0.0] * 4
    assert (result.mean_tokens_per_round, result.acceptance_rate, result.alpha, result.mean_k, result.bonus_rate,
            result.correction_rate) == (0.0,) * 6
    summary = metrics.summarize_calls([_call(accepted_RxB[:rounds], np.full(rounds, 4), 4, [1, 1])], 4)
    assert (summary["tokens_per_round"], summary["acceptance_rate"], summary["alpha"], summary["mean_k"]) == (
        None,) * 4
  assert metrics.summarize_calls([], 4)["alpha"] is None
  assert _policy_alpha([-1, -1], 4) == 0.25  # no active row: nothing tested, the prior stays
  # Autoregressive (K = 0): one token per round, no drafts proposed, so no acceptance.
  result = stats.summarize(np.zeros((3, 2), int), [4, 4], 3, 0)
  assert result.mean_tokens_per_round == 1.0 and result.alpha == 0.0 and result.acceptance_rate_per_position == []
  summary = metrics.summarize_calls([_call(np.zeros((3, 2), int), None, 0, [4, 4])], 0)
  assert summary["tokens_per_round"] == 1.0 and summary["acceptance_rate"] is None and summary["alpha"] is None
  assert summary["mean_k"] == 0.0
  assert _policy_alpha([0, 0], 0) == 0.25


def test_tree_figures_by_hand():
  """A tree of 8 nodes, 3 deep: per-depth acceptance, rates over the 8 nodes verified, a bonus at depth 3."""
  from specjax.trees import DynamicTree
  record = np.asarray([[3, 0], [1, 2], [-1, 3]])
  summary = stats.summarize(record, np.asarray([9, 8]), rounds=3, k=8, tree=DynamicTree(nodes=8, depth=3, top_k=2))
  assert (summary.k, summary.tree_nodes) == (3, 8)
  assert summary.mean_tokens_per_round == pytest.approx(1 + 9 / 5)
  assert summary.acceptance_rate == pytest.approx(9 / 40)
  assert summary.verified_per_accepted == pytest.approx(40 / 9)
  assert summary.acceptance_rate_per_position == pytest.approx([4 / 5, 3 / 4, 2 / 3])
  assert (summary.bonus_rate, summary.correction_rate) == (pytest.approx(2 / 5), pytest.approx(3 / 5))
