"""The printed result, laid out as `vllm bench serve` prints it (so the two read side by side), plus specjax's
speculation lines and the first distinct errors."""

import math

from specjax.benchmark.serving.metrics import METRICS, percentile_name

_HEADERS = {"ttft": ("TTFT", "Time to First Token"), "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
            "itl": ("ITL", "Inter-token Latency"), "e2el": ("E2EL", "End-to-end Latency")}


def _line(label: str, value) -> str:
  if isinstance(value, float):
    return f"{label:<40} {value:<10.2f}"
  return f"{label:<40} {value!s:<10}"


def format_summary(result: dict, percentiles=(99,), max_errors: int = 5) -> str:
  """The table for a result dict of `runner.run` (the metrics it holds; absent ones are skipped)."""
  lines = ["{:=^50}".format(" Serving Benchmark Result "),
           _line("Successful requests:", result["completed"]), _line("Failed requests:", result["failed"])]
  if result.get("max_concurrency"):
    lines.append(_line("Maximum request concurrency:", result["max_concurrency"]))
  rate = result.get("request_rate")
  if rate not in (None, "inf") and not (isinstance(rate, float) and math.isinf(rate)):
    lines.append(_line("Request rate configured (RPS):", float(rate)))
  lines += [_line("Benchmark duration (s):", result["duration"]),
            _line("Total input tokens:", result["total_input_tokens"]),
            _line("Total generated tokens:", result["total_output_tokens"]),
            _line("Request throughput (req/s):", result["request_throughput"])]
  if result.get("request_goodput") is not None:
    lines.append(_line("Request goodput (req/s):", result["request_goodput"]))
  lines += [_line("Output token throughput (tok/s):", result["output_throughput"]),
            _line("Peak concurrent requests:", result["max_concurrent_requests"]),
            _line("Total token throughput (tok/s):", result["total_token_throughput"])]
  for metric in METRICS:
    if f"mean_{metric}_ms" not in result:
      continue
    short, header = _HEADERS[metric]
    lines.append("{:-^50}".format(header))
    lines.append(_line(f"Mean {short} (ms):", result[f"mean_{metric}_ms"]))
    lines.append(_line(f"Median {short} (ms):", result[f"median_{metric}_ms"]))
    for p in percentiles:
      lines.append(_line(f"P{percentile_name(p)} {short} (ms):", result[f"p{percentile_name(p)}_{metric}_ms"]))
  if result.get("mean_acceptance_length") is not None or "spec_decode_acceptance_rate" in result:
    lines.append("{:-^50}".format("Speculative Decoding"))
    if result.get("acceptance_rate") is not None:
      lines.append(_line("Acceptance rate, per request (%):", 100.0 * result["acceptance_rate"]))
    if result.get("mean_acceptance_length") is not None:
      lines.append(_line("Acceptance length, per request:", result["mean_acceptance_length"]))
    if "spec_decode_acceptance_rate" in result:
      lines.append(_line("Acceptance rate, /metrics (%):", result["spec_decode_acceptance_rate"]))
      lines.append(_line("Acceptance length, /metrics:", result["spec_decode_acceptance_length"]))
      lines.append(_line("Drafts:", result["spec_decode_num_drafts"]))
  lines.append("=" * 50)
  errors = [e for e in dict.fromkeys(result.get("errors") or ()) if e]
  if errors:
    lines.append(f"Errors ({len(errors)} distinct; the first {min(len(errors), max_errors)}):")
    lines += [f"  {e}" for e in errors[:max_errors]]
  return "\n".join(lines)
