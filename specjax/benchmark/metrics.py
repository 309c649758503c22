"""Metrics from per-call records of the generation loop (host-side numpy; no model work).

A *call record* is one fused run of the prefill and decode programs over a batch (`host.run_batch`):
  {"wall_s": float, "first_token_s": float, "new_tokens": [per row], "accepted": [[per round per row]] with -1 for
  inactive rows, "k": int, "round_trip_us": the CPUs' placement probe just before the call (`placement`)}.
The per-run figures pool the active row-rounds of all call records and apply `specjax.stats`' definitions (the ones
`result.stats` and the adaptive policy use); the first token (from the prefill) belongs to no round.
"""

import numpy as np

from specjax import stats
from specjax.benchmark import placement


def pooled_rounds(records, k: int) -> tuple[np.ndarray, np.ndarray]:
  """`stats.active_rounds` of every call, concatenated: accepted drafts of each active row-round and the K proposed
  in that round (a record's "k_R" when the adaptive policy chose K per round, else k)."""
  return stats.pool(stats.active_rounds(r["accepted"], k if r.get("k_R") is None else r["k_R"])
                    for r in records)


def tokens_per_round(records) -> float | None:
  return stats.tokens_per_round(pooled_rounds(records, 0)[0])


def acceptance_rate(records, k: int) -> float | None:
  """Accepted drafts / proposed drafts; None for autoregressive (k = 0)."""
  return stats.acceptance_rate(*pooled_rounds(records, k))


def alpha_estimate(records, k: int) -> float | None:
  """`stats.alpha`: accepted drafts / tested drafts (Leviathan et al.'s per-position MLE); None without drafts."""
  return stats.alpha(*pooled_rounds(records, k))


def mean_k(records, k: int) -> float | None:
  """Drafts proposed per active row-round (K itself unless the adaptive policy varied it)."""
  return stats.mean_k(pooled_rounds(records, k)[1])


def throughput(records) -> float:
  """New tokens per second over all rows of all timed calls."""
  tokens = sum(int(np.sum(r["new_tokens"])) for r in records)
  wall = sum(float(r["wall_s"]) for r in records)
  return tokens / wall if wall > 0 else 0.0


def decode_throughput(records) -> float | None:
  """New tokens after each row's first over the time after the first token (no prefill): what llama.cpp's own
  eval timings measure. None when a call has no first-token time."""
  if not records or any("first_token_s" not in r for r in records):
    return None
  tokens = sum(max(int(n) - 1, 0) for r in records for n in r["new_tokens"])
  wall = sum(float(r["wall_s"]) - float(r["first_token_s"]) for r in records)
  return tokens / wall if wall > 0 else None


def paired_speedups(calls, ar_calls) -> dict:
  """Speedup over autoregressive decoding from calls paired with autoregressive calls on the same inputs, run
  back to back: the machine's drift between cells (up to 10% on a shared CPU) falls out of each pair's ratio.
  `paired_speedup_vs_ar` is the median pair; the pooled figure is total throughput over the paired calls."""
  ratios = _pair_ratios(calls, ar_calls, "autoregressive")
  return {"paired_speedup_vs_ar": float(np.median(ratios)) if ratios else None,
          "paired_speedup_vs_ar_pooled": throughput(calls) / throughput(ar_calls) if throughput(ar_calls) else None,
          "paired_speedup_vs_ar_min": float(min(ratios)) if ratios else None,
          "paired_calls": len(ratios),
          "paired_by_placement": paired_by_placement(calls, ar_calls)}


def _pair_ratios(calls, base_calls, base: str) -> list[float]:
  """Each call's throughput over its partner's (partners without tokens dropped)."""
  if len(calls) != len(base_calls) or not calls:
    raise ValueError(f"paired speedups need one {base} call per call, got {len(base_calls)} for {len(calls)}")
  return [throughput([a]) / throughput([b]) for a, b in zip(calls, base_calls) if throughput([b]) > 0]


def paired_over(calls, base_calls) -> dict:
  """Speedup over another drafter's calls (config.paired_reference), paired the way `paired_speedups` pairs (the
  placements' "ar_ms_per_token" is then the reference's)."""
  ratios = _pair_ratios(calls, base_calls, "reference")
  return {"speedup": float(np.median(ratios)) if ratios else None, "pairs": len(ratios),
          "by_placement": paired_by_placement(calls, base_calls)}


def paired_by_placement(calls, ar_calls) -> dict:
  """The pairs whose two calls started on the same host placement of the CPUs (`placement`, from each call's
  "round_trip_us"), per placement: how many, their median speedup and the autoregressive calls' decode ms per token
  (pooled). On a VM the host moves the vCPUs, the autoregressive step with them, and speedups follow (section 54)."""
  groups = {}
  for call, ar_call in zip(calls, ar_calls):
    where = {placement.placement(c.get("round_trip_us")) for c in (call, ar_call)}
    if len(where) == 1 and "" not in where and throughput([ar_call]) > 0:
      groups.setdefault(where.pop(), []).append((throughput([call]) / throughput([ar_call]), ar_call))
  by = {}
  for where, pairs in sorted(groups.items()):
    ar_tok_s = decode_throughput([a for _, a in pairs])
    by[where] = {"pairs": len(pairs), "speedup": float(np.median([r for r, _ in pairs])),
                 "ar_ms_per_token": 1e3 / ar_tok_s if ar_tok_s else None}
  return by


def latencies_ms_per_token(records) -> np.ndarray:
  """Per row of every call: the call's wall time / the row's new tokens (what one request sees)."""
  values = [1e3 * float(r["wall_s"]) / n for r in records for n in r["new_tokens"] if n > 0]
  return np.asarray(values, np.float64)


def percentile(values, q: float) -> float | None:
  values = np.asarray(values, np.float64)
  return float(np.percentile(values, q)) if values.size else None


def summarize_calls(records, k: int, tree=None) -> dict:
  """The run's figures over its call records. With `tree` (the rounds' token tree) K is its depth: alpha and the
  per-depth acceptance are per level, the acceptance rate and verified_per_accepted count its N nodes."""
  lat = latencies_ms_per_token(records)
  if tree is not None:
    records, k = [dict(r, k_R=None) for r in records], tree.max_depth
  accepted_N, k_N = pooled_rounds(records, k)
  verified_N = k_N if tree is None else np.full_like(k_N, tree.n_nodes)
  return {
      "tokens_per_round": tokens_per_round(records),
      "mean_k": stats.mean_k(verified_N),
      "acceptance_rate": stats.acceptance_rate(accepted_N, verified_N),
      "alpha": stats.alpha(accepted_N, k_N),
      "verified_per_accepted": stats.verified_per_accepted(accepted_N, verified_N),
      "acceptance_per_depth": stats.acceptance_per_position(accepted_N, k_N, k) if tree is not None else None,
      "acceptance_by_rank": _by_rank(records, tree),
      "acceptance_by_depth_and_rank": _by_rank(records, tree, by_depth=True),
      "throughput_tok_s": throughput(records),
      "decode_tok_s": decode_throughput(records),
      "latency_ms_per_token_p50": percentile(lat, 50),
      "latency_ms_per_token_p90": percentile(lat, 90),
      "ttft_ms_p50": percentile([1e3 * r["first_token_s"] for r in records if "first_token_s" in r], 50),
      "new_tokens": int(sum(int(np.sum(r["new_tokens"])) for r in records)),
      "rounds": int(sum(len(r["accepted"]) for r in records)),
      "wall_s": float(sum(r["wall_s"] for r in records)),
      "calls_by_placement": calls_by_placement(records),
  }


def calls_by_placement(records) -> dict:
  """How many calls started on each host placement of the CPUs (`placement`); empty where none was probed."""
  where = [placement.placement(r.get("round_trip_us")) for r in records]
  return {p: where.count(p) for p in sorted(set(where) - {""})}


def _by_rank(records, tree, by_depth: bool = False) -> list | None:
  """A tree's per-rank acceptance pooled over its calls' rank logs, or per depth with `by_depth` (None for a chain
  or calls without logs)."""
  logs = [(np.asarray(r["tree_ranks"]), np.asarray(r["tree_children"])) for r in records if r.get("tree_ranks")]
  if tree is None or not logs:
    return None
  depth_contexts = logs[0][0].shape[-1]
  rank, children = (np.concatenate([log[i].reshape(-1, depth_contexts) for log in logs]) for i in (0, 1))
  if by_depth:
    return stats.acceptance_by_depth_and_rank(rank, children, tree.width)
  return stats.acceptance_by_rank(rank, children, tree.width)


def summarize_phases(rounds) -> dict:
  """Median ms per round of each phase from phase-split round timings [{"draft_s", "verify_s", "accept_s"}]: the
  cost of a typical call, which a round preempted on a shared machine does not move (a mean of ~60 rounds did)."""
  return {f"{name}_ms_per_round": 1e3 * float(np.median([r[f"{name}_s"] for r in rounds])) if rounds else None
          for name in ("draft", "verify", "accept")}


def geometric_mean(values) -> float | None:
  values = [v for v in values if v is not None and v > 0]
  return float(np.exp(np.mean(np.log(values)))) if values else None
