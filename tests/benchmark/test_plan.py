"""Which cells a config runs (no model work)."""

from configs import bench_cpu, bench_smoke
from specjax.benchmark.runner import Cell, plan, validate_config


def test_grid_runs_every_k_at_every_batch_size():
  c = validate_config(bench_cpu.get_config())
  cells = plan(c)
  assert len([x for x in cells if x.method == "ar"]) == 5 * 2
  assert len([x for x in cells if x.method == "draft_model"]) == (6 + 1) * 5 * 2   # six K and "auto"
  assert Cell("prompt_lookup", "auto", 16, 1.0) in cells


def test_axes_sweep_runs_auto_at_the_first_batch_size_only():
  c = bench_cpu.get_config()
  c.sweep = "axes"
  autos = [x for x in plan(validate_config(c)) if x.k == "auto"]
  assert {x.batch_size for x in autos} == {1} and len(autos) == 2 * 2


def test_axes_sweep_and_smoke_covers_two_k_and_two_batch_sizes():
  cells = plan(validate_config(bench_smoke.get_config()))
  assert set(cells) == {Cell("ar", 0, 1, 0.0), Cell("ar", 0, 2, 0.0)} | {
      Cell(m, k, b, 0.0) for m in ("draft_model", "prompt_lookup") for k, b in ((2, 1), (4, 1), (2, 2))}


def test_ar_baseline_is_always_added():
  c = bench_cpu.get_config()
  c.methods = ("prompt_lookup",)
  assert validate_config(c)["methods"] == ("ar", "prompt_lookup")
