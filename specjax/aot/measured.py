"""The predictor checked against a measured benchmark: per-phase times from a `results.json` of
scripts/benchmark.py give the prediction, the fused end-to-end `speedup_vs_ar` is what it must match."""

import json

import numpy as np

from specjax.aot.predict import spec_speedup

PHASES = ("draft_ms_per_round", "verify_ms_per_round", "accept_ms_per_round")


def _alpha(record):
  alpha = record.get("alpha")
  return record.get("acceptance_rate") if alpha is None else alpha


def compare_with_measured(records: list[dict], tolerance: float = 0.25) -> list[dict]:
  """One row per speculative record with phase times: predicted vs measured speedup over its AR baseline
  (same batch size, category and temperature)."""
  def key(r):
    return r["batch_size"], r.get("category"), r.get("temperature")

  ours = [r for r in records if r.get("implementation", "specjax") == "specjax"]
  baselines = {key(r): r for r in ours if r["method"] == "ar" and r.get("verify_ms_per_round") is not None}
  rows = []
  for rec in ours:
    base = baselines.get(key(rec))
    if rec["method"] == "ar" or base is None or any(rec.get(p) is None for p in PHASES):
      continue
    alpha, k, measured = _alpha(rec), int(rec["k"]), rec.get("speedup_vs_ar")
    if alpha is None or measured is None:
      continue
    ar_ms = base["verify_ms_per_round"] + (base.get("accept_ms_per_round") or 0.0)
    # The draft phase of a round is K draft steps; verify and accept together are the K+1 verification.
    predicted = spec_speedup(alpha, k, ar_ms, rec["draft_ms_per_round"] / k,
                             rec["verify_ms_per_round"] + rec["accept_ms_per_round"])
    error = measured / predicted - 1.0
    rows.append({"method": rec["method"], "k": k, "batch_size": rec["batch_size"], "category": rec.get("category"),
                 "temperature": rec.get("temperature"), "alpha": alpha, "predicted_speedup": predicted,
                 "measured_speedup": measured, "relative_error": error, "within_tolerance": abs(error) <= tolerance})
  return rows


def summarize(rows: list[dict], tolerance: float = 0.25) -> dict:
  errors = np.abs([r["relative_error"] for r in rows])
  return {"n": len(rows), "tolerance": tolerance, "n_within": int(sum(r["within_tolerance"] for r in rows)),
          "fraction_within": float(np.mean(errors <= tolerance)) if len(rows) else None,
          "median_abs_error": float(np.median(errors)) if len(rows) else None,
          "max_abs_error": float(errors.max()) if len(rows) else None}


def load_results(path: str) -> list[dict]:
  with open(path, encoding="utf-8") as f:
    records = json.load(f)
  if isinstance(records, dict):
    records = records.get("records", [])
  if not isinstance(records, list):
    raise ValueError(f"{path}: expected a list of benchmark records")
  return records
