"""The result's figures from per-request timings, with `vllm bench serve`'s definitions and key names: over the
completed requests, TTFT, TPOT = (E2EL - TTFT) / (output tokens - 1) for requests of more than one token, ITL (every
gap between chunks, pooled), E2EL; mean / median / std / chosen percentiles in milliseconds (0 when there is no
value, as vLLM); throughputs over the run's duration; goodput = requests per second that met every given SLO (a
request of one token has TPOT 0 there). Failed requests count in `failed` only."""

import numpy as np

from specjax.benchmark.serving.client import RequestOutput

METRICS = ("ttft", "tpot", "itl", "e2el")
SLO_METRICS = ("ttft", "tpot", "e2el")


def parse_goodput(pairs) -> dict[str, float]:
  """{"ttft": ms, ...} from ["ttft:MS", "tpot:MS", ...] (vLLM's `--goodput` pairs)."""
  slos = {}
  for pair in pairs or ():
    name, sep, value = str(pair).partition(":")
    try:
      number = float(value)
    except ValueError:
      number = None
    if not sep or number is None:
      raise ValueError(f"a goodput SLO is 'KEY:MILLISECONDS' (KEY one of {', '.join(SLO_METRICS)}), got {pair!r}")
    if name not in SLO_METRICS:
      raise ValueError(f"unknown goodput metric {name!r}: one of {', '.join(SLO_METRICS)}")
    if number < 0:
      raise ValueError(f"a goodput SLO must be >= 0 ms, got {pair!r}")
    slos[name] = number
  return slos


def percentile_name(p: float) -> str:
  """99 -> "99", 99.9 -> "99.9" (the `pNN_..._ms` keys)."""
  return str(int(p)) if int(p) == p else str(p)


def tpot(output: RequestOutput) -> float | None:
  """Seconds per output token after the first; None for a request of at most one token."""
  if output.output_tokens <= 1:
    return None
  return (output.latency - output.ttft) / (output.output_tokens - 1)


def peak_concurrency(outputs) -> int:
  """The most completed requests in flight at once (intervals [start, start + E2EL); an end before a start)."""
  events = sorted([(o.start_time, 1) for o in outputs] + [(o.start_time + o.latency, -1) for o in outputs])
  now = peak = 0
  for _, delta in events:
    now += delta
    peak = max(peak, now)
  return peak


def _stats(values_s, percentiles) -> dict:
  values = np.asarray(values_s if len(values_s) else [0.0], np.float64) * 1e3
  out = {"mean": float(np.mean(values)), "median": float(np.median(values)), "std": float(np.std(values))}
  for p in percentiles:
    out[f"p{percentile_name(p)}"] = float(np.percentile(values, p))
  return out


def calculate_metrics(outputs: list[RequestOutput], duration_s: float, *, percentiles=(99,),
                      percentile_metrics=METRICS, goodput: dict | None = None) -> dict:
  """vLLM's result figures: completed / failed counts, token totals, throughputs, request_goodput (None without
  SLOs), max_concurrent_requests, and mean_/median_/std_/pNN_{metric}_ms for each of `percentile_metrics`."""
  unknown = set(percentile_metrics) - set(METRICS)
  if unknown:
    raise ValueError(f"unknown percentile metrics {sorted(unknown)}: choose from {', '.join(METRICS)}")
  if any(not 0 <= p <= 100 for p in percentiles):
    raise ValueError(f"metric percentiles must be in [0, 100], got {list(percentiles)}")
  if duration_s <= 0:
    raise ValueError(f"the run's duration must be > 0, got {duration_s}")
  done = [o for o in outputs if o.success]
  values = {"ttft": [o.ttft for o in done], "tpot": [t for t in map(tpot, done) if t is not None],
            "itl": [gap for o in done for gap in o.itl], "e2el": [o.latency for o in done]}
  total_input = sum(o.prompt_tokens for o in done)
  total_output = sum(o.output_tokens for o in done)
  good = None
  if goodput:
    limits_s = {name: ms / 1e3 for name, ms in goodput.items()}
    measured = lambda o: {"ttft": o.ttft, "tpot": tpot(o) or 0.0, "e2el": o.latency}  # noqa: E731
    good = sum(all(measured(o)[name] <= limit for name, limit in limits_s.items()) for o in done)
  result = {
      "completed": len(done),
      "failed": len(outputs) - len(done),
      "total_input_tokens": total_input,
      "total_output_tokens": total_output,
      "request_throughput": len(done) / duration_s,
      "request_goodput": None if good is None else good / duration_s,
      "output_throughput": total_output / duration_s,
      "total_token_throughput": (total_input + total_output) / duration_s,
      "max_concurrent_requests": peak_concurrency(done),
  }
  for metric in METRICS:
    if metric in percentile_metrics:
      for stat, value in _stats(values[metric], percentiles).items():
        result[f"{stat}_{metric}_ms"] = value
  return result


def spec_decode_summary(outputs: list[RequestOutput]) -> dict:
  """Speculation pooled over the completed requests that reported it: mean acceptance length (1 + accepted /
  rounds: tokens per verification) and acceptance rate (accepted / drafted); None where nothing was reported."""
  stats = [o.spec_decode for o in outputs if o.success and o.spec_decode]
  rounds = sum(int(s.get("rounds") or 0) for s in stats)
  drafted = sum(int(s.get("draft_tokens") or 0) for s in stats)
  accepted = sum(int(s.get("accepted_tokens") or 0) for s in stats)
  return {"mean_acceptance_length": 1 + accepted / rounds if rounds else None,
          "acceptance_rate": accepted / drafted if drafted else None}
