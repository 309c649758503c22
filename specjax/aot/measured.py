"""The predictor checked against a measured benchmark: per-phase times from a `results.json` of
scripts/benchmark.py give the prediction, the fused end-to-end speedup is what it must match (the paired one,
`paired_speedup_vs_ar`, where the run measured it; else `speedup_vs_ar`).

The measured speedup is end to end: each call's first token comes from the prefill (`ttft_ms_p50`), and the fused
loop runs a round without the phase-split mode's host round trips. Where a record has those figures the
prediction includes both: the prefill before the N - 1 later tokens of a row, and the phase-split overhead per
round (the AR record's phase-split round minus its fused step), taken off every round's phases."""

import json

import numpy as np

from specjax.aot.predict import spec_ms_per_token

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
    paired = rec.get("paired_speedup_vs_ar") is not None  # beside its own AR call: free of drift between cells
    alpha, k = _alpha(rec), int(rec["k"])
    measured = rec["paired_speedup_vs_ar"] if paired else rec.get("speedup_vs_ar")
    if alpha is None or measured is None:
      continue
    ar_step_ms = base["verify_ms_per_round"] + (base.get("accept_ms_per_round") or 0.0)
    ar_fused_ms, tokens = _fused_step_ms(base), _tokens_per_row(rec)
    end_to_end = ar_fused_ms is not None and tokens is not None and rec.get("ttft_ms_p50") is not None
    if end_to_end:  # the AR phase-split round (its empty draft phase included) against its fused step
      overhead_ms = (base.get("draft_ms_per_round") or 0.0) + ar_step_ms - ar_fused_ms
      ar_ms = ar_fused_ms
    else:
      overhead_ms, ar_ms = 0.0, ar_step_ms
    # The draft phase of a round is K draft steps; verify and accept together are the K+1 verification.
    spec_ms = spec_ms_per_token(alpha, k, ar_ms, rec["draft_ms_per_round"] / k,
                                rec["verify_ms_per_round"] + rec["accept_ms_per_round"] - overhead_ms)
    if end_to_end:
      predicted = (base["ttft_ms_p50"] + (tokens - 1) * ar_ms) / (rec["ttft_ms_p50"] + (tokens - 1) * spec_ms)
    else:
      predicted = ar_ms / spec_ms
    error = measured / predicted - 1.0
    rows.append({"method": rec["method"], "k": k, "batch_size": rec["batch_size"], "category": rec.get("category"),
                 "temperature": rec.get("temperature"), "alpha": alpha, "predicted_speedup": predicted,
                 "measured_speedup": measured, "measured_paired": paired, "relative_error": error,
                 "within_tolerance": abs(error) <= tolerance, "end_to_end": end_to_end,
                 "phase_overhead_ms": overhead_ms})
  return rows


def _fused_step_ms(ar_record) -> float | None:
  """The AR record's fused step without its prefills: (wall of all calls - their first-token times) / rounds."""
  needed = ("fused_ms_per_round", "rounds", "ttft_ms_p50", "n_calls")
  if any(ar_record.get(name) is None for name in needed) or not ar_record["rounds"]:
    return None
  return (ar_record["fused_ms_per_round"] * ar_record["rounds"]
          - ar_record["ttft_ms_p50"] * ar_record["n_calls"]) / ar_record["rounds"]


def _tokens_per_row(record) -> float | None:
  if any(record.get(name) is None for name in ("new_tokens", "n_calls", "batch_size")) or not record["n_calls"]:
    return None
  return record["new_tokens"] / (record["n_calls"] * record["batch_size"])


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
