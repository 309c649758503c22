"""The report's speedup tables (specjax.benchmark.report): paired figures where every cell was paired, else the
ratio to the autoregressive cell."""

from specjax.benchmark import report


def _row(k, category, speedup, paired=None):
  row = {"method": "feature_head", "k": k, "batch_size": 1, "temperature": 0.0, "category": category,
         "speedup_vs_ar": speedup}
  if paired is not None:
    row["paired_speedup_vs_ar"] = paired
  return row


def test_tables_show_the_paired_median_when_every_cell_was_paired():
  rows = [_row(1, "prose", 0.97, 1.21), _row(2, "prose", 1.03, 1.18),
          _row(1, "code", 1.4, 1.6), _row(2, "code", 1.5, 1.8)]
  assert report.speedup_key(rows) == "paired_speedup_vs_ar"
  table = report.speedup_by_category_table(rows, "feature_head", 1, 0.0)
  assert "| prose | 1.21 | 1.18 |" in table and "| code | 1.60 | 1.80 |" in table
  batch = report.speedup_by_batch_table(rows, "feature_head", 0.0)
  assert f"| 1 | {(1.21 * 1.6) ** 0.5:.2f} | {(1.18 * 1.8) ** 0.5:.2f} |" in batch


def test_tables_fall_back_to_the_cell_ratio_when_any_cell_was_unpaired():
  rows = [_row(1, "prose", 0.97, 1.21), _row(2, "prose", 1.03)]
  assert report.speedup_key(rows) == "speedup_vs_ar" and report.speedup_key([]) == "speedup_vs_ar"
  assert "| prose | 0.97 | 1.03 |" in report.speedup_by_category_table(rows, "feature_head", 1, 0.0)


def test_the_placement_section_appears_only_when_the_run_saw_both_placements():
  near = {"pairs": 3, "speedup": 1.12, "ar_ms_per_token": 9.3}
  far = {"pairs": 2, "speedup": 1.31, "ar_ms_per_token": 12.6}
  one = [dict(_row(4, "prose", 1.1, 1.2), paired_by_placement={"near": near})]
  assert report.placement_section(one) == [] and report.placement_section([_row(4, "prose", 1.1)]) == []
  both = [dict(_row(4, "prose", 1.1, 1.2), paired_by_placement={"near": near, "far": far})]
  text = "\n".join(report.placement_section(both))
  assert "| feature_head | prose | 1 | 4 | near | 3 | 9.30 | 1.12 |" in text
  assert "| feature_head | prose | 1 | 4 | far | 2 | 12.60 | 1.31 |" in text
