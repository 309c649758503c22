"""The predictor against a (synthetic) benchmark results.json: predicted from phase times, compared with the
measured end-to-end speedup, within 25% or not."""

import json

import pytest

from specjax.aot import measured

E4 = (1 - 0.8 ** 5) / (1 - 0.8)


def _records():
  base = {"batch_size": 1, "category": "code", "temperature": 0.0, "implementation": "specjax"}
  return [
      dict(base, method="ar", k=0, verify_ms_per_round=10.0, accept_ms_per_round=1.0, speedup_vs_ar=1.0),
      # predicted: AR round 11 ms; a round is 4 + 12 + 2 = 18 ms for E4 tokens: 11 * 3.3616 / 18 = 2.0543x
      dict(base, method="draft_model", k=4, alpha=0.8, acceptance_rate=0.7, draft_ms_per_round=4.0,
           verify_ms_per_round=12.0, accept_ms_per_round=2.0, speedup_vs_ar=1.8),
      dict(base, method="prompt_lookup", k=4, alpha=0.8, draft_ms_per_round=4.0, verify_ms_per_round=12.0,
           accept_ms_per_round=2.0, speedup_vs_ar=1.4),
      dict(base, method="draft_model", k=4, alpha=0.8, draft_ms_per_round=None, verify_ms_per_round=None,
           accept_ms_per_round=None, speedup_vs_ar=1.5),                       # fused only: no prediction
      dict(base, method="draft_model", k=2, batch_size=4, alpha=0.5, draft_ms_per_round=1.0,
           verify_ms_per_round=1.0, accept_ms_per_round=1.0, speedup_vs_ar=1.0),  # no AR baseline at batch 4
      dict(base, method="hf_prompt_lookup", k=4, implementation="hf", speedup_vs_ar=2.0),
  ]


def test_predicted_against_measured(tmp_path):
  path = tmp_path / "results.json"
  path.write_text(json.dumps(_records()))
  rows = measured.compare_with_measured(measured.load_results(str(path)))
  assert [r["method"] for r in rows] == ["draft_model", "prompt_lookup"]
  first, second = rows
  assert first["alpha"] == 0.8  # the i.i.d. alpha estimate, not the raw acceptance rate
  assert first["predicted_speedup"] == pytest.approx(11 * E4 / 18)
  assert first["relative_error"] == pytest.approx(1.8 / (11 * E4 / 18) - 1)  # -12%
  assert first["within_tolerance"] and not second["within_tolerance"]  # 1.4 is -32%
  summary = measured.summarize(rows)
  assert summary["n"] == 2 and summary["n_within"] == 1 and summary["fraction_within"] == 0.5
  assert summary["max_abs_error"] == pytest.approx(1 - 1.4 / (11 * E4 / 18))


def test_alpha_falls_back_to_the_acceptance_rate():
  records = _records()[:2]
  del records[1]["alpha"]
  (row,) = measured.compare_with_measured(records)
  assert row["alpha"] == 0.7


def test_results_file_must_hold_records(tmp_path):
  path = tmp_path / "results.json"
  path.write_text(json.dumps("nope"))
  with pytest.raises(ValueError, match="list of benchmark records"):
    measured.load_results(str(path))


def test_end_to_end_prediction_adds_the_prefill_and_removes_the_phase_split_overhead():
  base = {"batch_size": 1, "category": "prose", "temperature": 0.0, "n_calls": 1, "new_tokens": 31}
  # AR: 30 rounds of a 12 ms fused round with one 60 ms prefill -> a 10 ms fused step; its phase-split round is
  # 0 + 10 + 4 = 14 ms, so the phase-split mode adds 4 ms per round.
  ar = dict(base, method="ar", k=0, draft_ms_per_round=0.0, verify_ms_per_round=10.0, accept_ms_per_round=4.0,
            fused_ms_per_round=12.0, rounds=30, ttft_ms_p50=60.0, speedup_vs_ar=1.0)
  # Speculative: a round is 4 + 12 + 2 - 4 = 14 ms for E4 tokens; the 30 tokens after a 70 ms prefill.
  spec = dict(base, method="feature_head", k=4, alpha=0.8, draft_ms_per_round=4.0, verify_ms_per_round=12.0,
              accept_ms_per_round=2.0, ttft_ms_p50=70.0, speedup_vs_ar=1.8)
  (row,) = measured.compare_with_measured([ar, spec])
  assert row["end_to_end"] and row["phase_overhead_ms"] == pytest.approx(4.0)
  assert row["predicted_speedup"] == pytest.approx((60 + 30 * 10) / (70 + 30 * 14 / E4))


def test_the_paired_speedup_is_what_the_prediction_must_match_when_measured():
  records = _records()[:2]
  records[1]["paired_speedup_vs_ar"] = 1.9
  (row,) = measured.compare_with_measured(records)
  assert row["measured_paired"] and row["measured_speedup"] == 1.9
  assert row["relative_error"] == pytest.approx(1.9 / (11 * E4 / 18) - 1)
  (row,) = measured.compare_with_measured(_records()[:2])
  assert not row["measured_paired"] and row["measured_speedup"] == 1.8
