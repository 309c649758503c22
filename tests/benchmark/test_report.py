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
