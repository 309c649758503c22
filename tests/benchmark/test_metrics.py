"""Metrics from synthetic round records, against values worked out by hand."""

import pytest

from specjax.benchmark import metrics

# Two calls, K = 2. Call 1: batch 2, three rounds (row 1 finished after round 2); call 2: batch 1, two rounds.
CALLS = [
    {"wall_s": 1.0, "new_tokens": [8, 5], "accepted": [[2, 1], [0, 2], [2, -1]], "k": 2},
    {"wall_s": 0.5, "new_tokens": [4], "accepted": [[1], [1]], "k": 2},
]


def test_tokens_per_round_and_acceptance():
  # active accepted counts: 2, 1, 0, 2, 2, 1, 1 -> sum 9 over 7 row-rounds
  assert metrics.tokens_per_round(CALLS) == pytest.approx((9 + 7) / 7)
  assert metrics.acceptance_rate(CALLS, 2) == pytest.approx(9 / 14)
  # tested drafts: min(n + 1, K) = 2, 2, 1, 2, 2, 2, 2 = 13
  assert metrics.alpha_estimate(CALLS, 2) == pytest.approx(9 / 13)


def test_throughput_and_latency():
  assert metrics.throughput(CALLS) == pytest.approx(17 / 1.5)
  # per row: 1000/8, 1000/5, 500/4 ms per token
  assert sorted(metrics.latencies_ms_per_token(CALLS)) == pytest.approx([125.0, 125.0, 200.0])
  summary = metrics.summarize_calls(CALLS, 2)
  assert summary["latency_ms_per_token_p50"] == pytest.approx(125.0)
  assert summary["latency_ms_per_token_p90"] == pytest.approx(125.0 + 0.8 * 75.0)
  assert summary["new_tokens"] == 17 and summary["rounds"] == 5


def test_autoregressive_has_no_acceptance():
  calls = [{"wall_s": 1.0, "new_tokens": [3], "accepted": [[0], [0]], "k": 0}]
  assert metrics.acceptance_rate(calls, 0) is None and metrics.alpha_estimate(calls, 0) is None
  assert metrics.tokens_per_round(calls) == 1.0


def test_phase_medians_and_geometric_mean():
  rounds = [{"draft_s": 0.001, "verify_s": 0.010, "accept_s": 0.002},
            {"draft_s": 0.003, "verify_s": 0.020, "accept_s": 0.002},
            {"draft_s": 0.002, "verify_s": 0.500, "accept_s": 0.004}]  # a preempted verify does not move it
  assert metrics.summarize_phases(rounds) == pytest.approx(
      {"draft_ms_per_round": 2.0, "verify_ms_per_round": 20.0, "accept_ms_per_round": 2.0})
  assert metrics.summarize_phases([]) == {"draft_ms_per_round": None, "verify_ms_per_round": None,
                                          "accept_ms_per_round": None}
  assert metrics.geometric_mean([1.0, 4.0, None]) == pytest.approx(2.0)


def test_paired_speedups_take_the_ratio_per_pair():
  fast = [{"wall_s": 1.0, "new_tokens": [10], "accepted": []}, {"wall_s": 2.0, "new_tokens": [10], "accepted": []},
          {"wall_s": 1.0, "new_tokens": [30], "accepted": []}]
  base = [{"wall_s": 2.0, "new_tokens": [10], "accepted": []}, {"wall_s": 2.0, "new_tokens": [10], "accepted": []},
          {"wall_s": 1.0, "new_tokens": [10], "accepted": []}]
  paired = metrics.paired_speedups(fast, base)  # pair ratios 2, 1, 3
  assert paired["paired_speedup_vs_ar"] == pytest.approx(2.0) and paired["paired_speedup_vs_ar_min"] == pytest.approx(1.0)
  assert paired["paired_speedup_vs_ar_pooled"] == pytest.approx((50 / 4) / (30 / 5)) and paired["paired_calls"] == 3
  with pytest.raises(ValueError, match="one autoregressive call per call"):
    metrics.paired_speedups(fast, base[:2])
  assert paired["paired_by_placement"] == {}  # no call was probed


def test_paired_speedups_split_by_the_placement_each_pair_started_on():
  def call(wall, trip, first=0.0):
    return {"wall_s": wall, "first_token_s": first, "new_tokens": [10], "accepted": [], "round_trip_us": trip}
  near, far = 0.12, 0.42
  fast = [call(1.0, near), call(1.0, far), call(2.0, far), call(1.0, near), call(1.0, None)]
  base = [call(3.0, near, 1.0), call(2.0, far, 0.2), call(2.0, far, 0.2), call(1.0, far), call(1.0, near)]
  by = metrics.paired_speedups(fast, base)["paired_by_placement"]  # the 4th pair is mixed, the 5th unprobed
  assert by["near"] == {"pairs": 1, "speedup": pytest.approx(3.0), "ar_ms_per_token": pytest.approx(2000 / 9)}
  assert by["far"]["pairs"] == 2 and by["far"]["speedup"] == pytest.approx(1.5)
  assert by["far"]["ar_ms_per_token"] == pytest.approx(1e3 * 3.6 / 18)
  assert metrics.calls_by_placement(fast) == {"far": 2, "near": 2}


def test_paired_over_a_reference_takes_the_ratio_per_pair_and_per_placement():
  def call(wall, tokens, trip):
    return {"wall_s": wall, "first_token_s": 0.0, "new_tokens": [tokens], "accepted": [], "round_trip_us": trip}
  tree = [call(1.0, 12, 0.1), call(1.0, 10, 0.5), call(1.0, 9, 0.1)]
  chain = [call(1.0, 10, 0.1), call(1.0, 10, 0.5), call(1.0, 10, 0.1)]
  over = metrics.paired_over(tree, chain)  # pair ratios 1.2, 1.0, 0.9
  assert over["speedup"] == pytest.approx(1.0) and over["pairs"] == 3
  assert over["by_placement"]["near"]["speedup"] == pytest.approx(1.05) and over["by_placement"]["near"]["pairs"] == 2
  assert over["by_placement"]["far"]["speedup"] == pytest.approx(1.0)
  with pytest.raises(ValueError, match="one reference call per call"):
    metrics.paired_over(tree, chain[:1])


def test_decode_throughput_leaves_the_prefill_out():
  calls = [{"wall_s": 2.0, "first_token_s": 0.5, "new_tokens": [31, 16], "accepted": []},
           {"wall_s": 1.0, "first_token_s": 0.25, "new_tokens": [16, 16], "accepted": []}]
  assert metrics.decode_throughput(calls) == pytest.approx((30 + 15 + 15 + 15) / (1.5 + 0.75))
  assert metrics.throughput(calls) == pytest.approx(79 / 3.0)
  assert metrics.decode_throughput([{"wall_s": 1.0, "new_tokens": [4], "accepted": []}]) is None
