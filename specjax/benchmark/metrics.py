"""Metrics from per-call records of the generation loop (host-side numpy; no model work).

A *call record* is one fused `generate_program` run over a batch:
  {"wall_s": float, "first_token_s": float, "new_tokens": [per row], "accepted": [[per round per row]] with -1 for
  inactive rows, "k": int}.
Definitions follow `specjax.stats`: tokens per round = accepted + 1 over active row-rounds; the first token (from
the prefill) belongs to no round.
"""

import numpy as np


def _active_with_k(records, k: int):
  """Accepted drafts of every active row-round, and the K proposed in that round (a record's "k_R" when the
  adaptive policy chose K per round, else k)."""
  accepted, ks = [], []
  for r in records:
    if not len(r["accepted"]):
      continue
    a_RxB = np.asarray(r["accepted"], np.int64).reshape(len(r["accepted"]), -1)
    k_R = np.asarray(r["k_R"], np.int64) if r.get("k_R") is not None else np.full(a_RxB.shape[0], k)
    k_RxB = np.broadcast_to(k_R[:, None], a_RxB.shape)
    accepted.append(a_RxB[a_RxB >= 0])
    ks.append(k_RxB[a_RxB >= 0])
  if not accepted:
    return np.zeros((0,), np.int64), np.zeros((0,), np.int64)
  return np.concatenate(accepted), np.concatenate(ks)


def _active(records):
  return _active_with_k(records, 0)[0]


def tokens_per_round(records) -> float | None:
  active = _active(records)
  return float((active + 1).mean()) if active.size else None


def acceptance_rate(records, k: int) -> float | None:
  """Accepted drafts / proposed drafts (K per active row-round); None for autoregressive (k = 0)."""
  active, k_per = _active_with_k(records, k)
  if not k or not k_per.sum():
    return None
  return float(active.sum() / k_per.sum())


def alpha_estimate(records, k: int) -> float | None:
  """Per-position acceptance probability alpha under Leviathan et al.'s i.i.d. model (its maximum-likelihood
  estimate): accepted drafts / drafts that were tested (a round that accepts n < K drafts tested n + 1)."""
  active, k_per = _active_with_k(records, k)
  if not k or not active.size:
    return None
  tested = np.minimum(active + 1, k_per).sum()
  return float(active.sum() / tested) if tested else None


def mean_k(records, k: int) -> float | None:
  """Drafts proposed per active row-round (K itself unless the adaptive policy varied it)."""
  _, k_per = _active_with_k(records, k)
  return float(k_per.mean()) if k_per.size else None


def throughput(records) -> float:
  """New tokens per second over all rows of all timed calls."""
  tokens = sum(int(np.sum(r["new_tokens"])) for r in records)
  wall = sum(float(r["wall_s"]) for r in records)
  return tokens / wall if wall > 0 else 0.0


def paired_speedups(calls, ar_calls) -> dict:
  """Speedup over autoregressive decoding from calls paired with autoregressive calls on the same inputs, run
  back to back: the machine's drift between cells (up to 10% on a shared CPU) falls out of each pair's ratio.
  `paired_speedup_vs_ar` is the median pair; the pooled figure is total throughput over the paired calls."""
  if len(calls) != len(ar_calls) or not calls:
    raise ValueError(f"paired speedups need one autoregressive call per call, got {len(ar_calls)} for {len(calls)}")
  ratios = [throughput([a]) / throughput([b]) for a, b in zip(calls, ar_calls) if throughput([b]) > 0]
  return {"paired_speedup_vs_ar": float(np.median(ratios)) if ratios else None,
          "paired_speedup_vs_ar_pooled": throughput(calls) / throughput(ar_calls) if throughput(ar_calls) else None,
          "paired_speedup_vs_ar_min": float(min(ratios)) if ratios else None,
          "paired_calls": len(ratios)}


def latencies_ms_per_token(records) -> np.ndarray:
  """Per row of every call: the call's wall time / the row's new tokens (what one request sees)."""
  values = [1e3 * float(r["wall_s"]) / n for r in records for n in r["new_tokens"] if n > 0]
  return np.asarray(values, np.float64)


def percentile(values, q: float) -> float | None:
  values = np.asarray(values, np.float64)
  return float(np.percentile(values, q)) if values.size else None


def summarize_calls(records, k: int) -> dict:
  lat = latencies_ms_per_token(records)
  return {
      "tokens_per_round": tokens_per_round(records),
      "mean_k": mean_k(records, k),
      "acceptance_rate": acceptance_rate(records, k),
      "alpha": alpha_estimate(records, k),
      "throughput_tok_s": throughput(records),
      "latency_ms_per_token_p50": percentile(lat, 50),
      "latency_ms_per_token_p90": percentile(lat, 90),
      "ttft_ms_p50": percentile([1e3 * r["first_token_s"] for r in records if "first_token_s" in r], 50),
      "new_tokens": int(sum(int(np.sum(r["new_tokens"])) for r in records)),
      "rounds": int(sum(len(r["accepted"]) for r in records)),
      "wall_s": float(sum(r["wall_s"] for r in records)),
  }


def summarize_phases(rounds) -> dict:
  """Median ms per round of each phase from phase-split round timings [{"draft_s", "verify_s", "accept_s"}]: the
  cost of a typical call, which a round preempted on a shared machine does not move (a mean of ~60 rounds did)."""
  return {f"{name}_ms_per_round": 1e3 * float(np.median([r[f"{name}_s"] for r in rounds])) if rounds else None
          for name in ("draft", "verify", "accept")}


def geometric_mean(values) -> float | None:
  values = [v for v in values if v is not None and v > 0]
  return float(np.exp(np.mean(np.log(values)))) if values else None
