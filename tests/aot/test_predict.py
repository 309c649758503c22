"""The roofline predictor, the paper comparison and the collective parser against hand-computed cases."""

import dataclasses

import pytest

from specjax.aot import collectives, paper, predict
from specjax.aot.analysis import ProgramFigures, interpolate

E4 = (1 - 0.8 ** 5) / (1 - 0.8)  # 3.3616 expected tokens per round at alpha 0.8, K 4


def test_speculative_ms_per_token_by_hand():
  # AR 10 ms; draft step 1 ms; verify of 5 positions 12 ms: (4 * 1 + 12) / 3.3616 = 4.7596 ms/token.
  assert predict.spec_ms_per_token(0.8, 4, 10.0, 1.0, 12.0) == pytest.approx(16 / E4)
  assert predict.spec_speedup(0.8, 4, 10.0, 1.0, 12.0) == pytest.approx(10 * E4 / 16)
  # alpha 0: every round yields one token and costs K drafts + a verify.
  assert predict.spec_ms_per_token(0.0, 2, 10.0, 1.0, 10.0) == pytest.approx(12.0)
  # alpha 1, free drafts, verify = AR step: K+1 tokens per AR step.
  assert predict.spec_speedup(1.0, 3, 10.0, 0.0, 10.0) == pytest.approx(4.0)


def test_implied_alpha_inverts_the_speedup():
  speedup = predict.spec_speedup(0.7, 4, 14.1, 1.8, 14.5)
  assert predict.implied_alpha(speedup, 4, 14.1, 1.8, 14.5) == pytest.approx(0.7, abs=1e-8)
  assert predict.implied_alpha(10.0, 4, 14.1, 1.8, 14.5) is None  # more than K+1 tokens per round
  assert predict.implied_alpha(0.1, 4, 14.1, 1.8, 14.5) is None   # slower than alpha 0 allows


def test_paper_comparison_by_hand():
  table = {"ar_ms_per_token": 10.0, "draft_ms_per_token": 1.0, "rows": [{"task": "t", "ms_per_token": 16 / E4,
                                                                         "speedup": 10 * E4 / 16}]}
  # Roofline: AR 5 ms, draft 0.25 ms, verify 6 ms (ratio 1.2 = the paper case's 12 / 10).
  out = paper.compare_with_paper(table, 4, ar_ms=5.0, draft_step_ms=0.25, verify_ms=6.0, n_collectives_ar=100)
  row = out["rows"][0]
  assert row["alpha_implied_paper_costs"] == pytest.approx(0.8, abs=1e-8)
  assert row["roofline_ms_per_token"] == pytest.approx((4 * 0.25 + 6.0) / E4)
  assert row["roofline_speedup"] == pytest.approx(5.0 * E4 / 7.0)
  assert out["paper_fraction_of_roofline"] == pytest.approx(0.5)
  assert out["us_per_collective_to_close_ar_gap"] == pytest.approx(50.0)  # 5 ms over 100 all-reduces
  lines = paper.explain(out)
  assert "50% of the HBM roofline" in lines[0] and "over-predicts" in lines[2]


def test_collectives_from_hlo_lines():
  hlo = "\n".join([
      "  %all-reduce.1 = bf16[1,5,8192]{2,1,0} all-reduce(%x), replica_groups=[1,16]<=[16], to_apply=%add",
      "  %ar-start = (f32[4,256], f32[4,256]) all-reduce-start(%y), replica_groups={{0,1,2,3}}, to_apply=%add",
      "  %ar-done = f32[4,256] all-reduce-done(%ar-start)",
      "  %all-gather.3 = f32[64,128]{1,0} all-gather(%z), dimensions={0}, "
      "replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_1'}",
      "  %add.1 = f32[4] add(%a, %b)",
  ])
  out = collectives.collectives(hlo, default_group=1)
  assert out["all-reduce"]["count"] == 2
  assert out["all-reduce"]["result_bytes"] == 5 * 8192 * 2 + 4 * 256 * 4
  assert out["all-reduce"]["moved_bytes"] == pytest.approx(2 * 15 / 16 * 81920 + 2 * 3 / 4 * 4096)
  assert out["all-gather"] == {"count": 1, "result_bytes": 64 * 128 * 4, "moved_bytes": 3 / 4 * 32768}


def _figures(positions, scale):
  return ProgramFigures(name="p", role="target", positions=positions, k=positions - 1, argument_bytes=1000,
                        temp_bytes=10 * scale, output_bytes=100, alias_bytes=50, weight_bytes=900, cache_bytes=80,
                        kv_read_bytes=40, flops=1e6 * scale, model_flops=1e6 * scale, xla_bytes_accessed=5e3,
                        roofline_bytes=1e3 + scale, collectives={"all-reduce": {"count": 5, "result_bytes": 10 * scale,
                                                                                "moved_bytes": 15.0 * scale}},
                        compute_ms=1.0 * scale, memory_ms=2.0, comm_ms=0.1 * scale, hbm_bytes=10**6)


def test_verify_figures_interpolate_affinely_in_positions():
  one, five = _figures(1, 1), _figures(5, 5)
  three = interpolate(one, five, k=2)
  assert (three.positions, three.k, three.interpolated) == (3, 2, True)
  assert three.flops == pytest.approx(3e6) and three.compute_ms == pytest.approx(3.0)
  assert three.collectives["all-reduce"] == {"count": 5, "result_bytes": 30.0, "moved_bytes": 45.0}
  assert three.roofline_ms == pytest.approx(3.0 + 0.3)  # compute-bound at 3 positions
  assert dataclasses.replace(interpolate(one, five, k=4), interpolated=False) == dataclasses.replace(
      five, name="verify_k4")
