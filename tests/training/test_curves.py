"""The training curves (specjax.training.curves): read back from metrics.jsonl, smoothed, drawn; bad input named."""

import json

import numpy as np
import pytest

from specjax.training.curves import read_metrics, smoothed, write_curves


def _write(path, records):
  path.write_text("".join(json.dumps(r) + "\n" for r in records))
  return str(path)


def test_records_split_and_ordered(tmp_path):
  path = _write(tmp_path / "metrics.jsonl", [
      {"step": 20, "kl": 2.0, "top1_1": 0.3}, {"step": 0, "heldout_kl": 9.0, "heldout_top1_1": 0.0},
      {"step": 10, "kl": 3.0, "top1_1": 0.2}, {"step": 20, "heldout_kl": 2.5, "heldout_top1_1": 0.25}])
  training, heldout = read_metrics(path)
  assert [r["step"] for r in training] == [10, 20] and [r["step"] for r in heldout] == [0, 20]


def test_smoothed_is_the_trailing_mean():
  np.testing.assert_allclose(smoothed([1.0, 3.0, 5.0, 7.0], 2), [1.0, 2.0, 4.0, 6.0])
  np.testing.assert_allclose(smoothed([4.0], 10), [4.0])


def test_figure_written(tmp_path):
  records = [{"step": 10 * i, "kl": 5.0 / (i + 1), "top1_1": i / 20} for i in range(1, 20)]
  records += [{"step": 0, "heldout_kl": 9.0, "heldout_top1_1": 0.0}, {"step": 190, "heldout_kl": 1.0,
                                                                        "heldout_top1_1": 0.5}]
  out = write_curves(_write(tmp_path / "metrics.jsonl", records), str(tmp_path / "plots" / "curves.png"),
                     acceptance=(1.0, 1.8, 4))
  with open(out, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_bad_input_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="no training metrics"):
    read_metrics(str(tmp_path / "missing.jsonl"))
  with pytest.raises(ValueError, match="no training or held-out records"):
    read_metrics(_write(tmp_path / "empty.jsonl", [{"step": 0, "other": 1}]))
