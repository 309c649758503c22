"""Server-wide counters of the serving engine and their Prometheus text exposition, under vLLM's metric names (so
dashboards and `vllm bench` tooling read them unchanged): the speculative counters `vllm:spec_decode_num_drafts`,
`..._num_draft_tokens`, `..._num_accepted_tokens` and `..._num_accepted_tokens_per_pos{position}` (a draft is one
verification of one request's proposals; positions count from 0, as vLLM's do), plus request and token counters and
the running / waiting gauges. Counters are exposed with the `_total` suffix, as prometheus_client writes them."""

import dataclasses
import threading

import numpy as np


@dataclasses.dataclass
class Counters:
  """Totals since the engine started (read a consistent copy with `EngineMetrics.snapshot`)."""

  max_k: int
  num_drafts: int = 0
  num_draft_tokens: int = 0
  num_accepted_tokens: int = 0
  accepted_per_pos: list = None
  prompt_tokens: int = 0
  generation_tokens: int = 0
  finished: dict = None          # finish reason -> requests
  rejected_queue_full: int = 0
  steps: int = 0
  row_rounds: int = 0            # rounds of active rows, speculative or not
  state_resizes: int = 0         # times the persistent state moved to another row bucket
  catch_ups: int = 0             # drafter catch-ups after steps that ran without it (adaptive K)
  state_rows: int = 0            # rows the persistent state holds now (the row bucket a step computes)
  running: int = 0
  waiting: int = 0

  def __post_init__(self):
    self.accepted_per_pos = self.accepted_per_pos or [0] * self.max_k
    self.finished = self.finished or {}


class EngineMetrics:
  """Thread-safe counters: the engine thread records, any thread snapshots."""

  def __init__(self, max_k: int):
    self._lock = threading.Lock()
    self._counters = Counters(max_k=max_k)

  def reset(self) -> None:
    with self._lock:
      self._counters = Counters(max_k=self._counters.max_k)

  def record_rounds(self, accepted_N, k_N) -> None:
    """Active row-rounds of a step: accepted drafts and the K proposed in each (K = 0: no draft)."""
    accepted_N, k_N = np.asarray(accepted_N), np.asarray(k_N)
    drafted = k_N > 0
    with self._lock:
      c = self._counters
      c.row_rounds += int(k_N.size)
      c.num_drafts += int(drafted.sum())
      c.num_draft_tokens += int(k_N.sum())
      c.num_accepted_tokens += int(accepted_N[drafted].sum())
      for i in range(c.max_k):
        c.accepted_per_pos[i] += int((accepted_N[drafted] > i).sum())

  def add(self, **amounts) -> None:
    with self._lock:
      for name, amount in amounts.items():
        setattr(self._counters, name, getattr(self._counters, name) + amount)

  def set(self, **values) -> None:
    with self._lock:
      for name, value in values.items():
        setattr(self._counters, name, value)

  def finish(self, reason: str) -> None:
    with self._lock:
      self._counters.finished[reason] = self._counters.finished.get(reason, 0) + 1

  def snapshot(self) -> Counters:
    with self._lock:
      c = self._counters
      return dataclasses.replace(c, accepted_per_pos=list(c.accepted_per_pos), finished=dict(c.finished))


def _escape(value: str) -> str:
  return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus_text(counters: Counters, model_name: str) -> str:
  """The Prometheus text format (version 0.0.4) of the counters, each labelled with the served model's name."""
  label = f'model_name="{_escape(model_name)}"'
  lines = []

  def metric(name, kind, doc, samples):
    lines.append(f"# HELP {name} {doc}")
    lines.append(f"# TYPE {name} {kind}")
    suffix = "_total" if kind == "counter" else ""
    for extra, value in samples:
      labels = ",".join([label] + ([extra] if extra else []))
      lines.append(f"{name}{suffix}{{{labels}}} {value}")

  metric("vllm:num_requests_running", "gauge", "Requests in decode slots.", [("", counters.running)])
  metric("vllm:num_requests_waiting", "gauge", "Requests waiting for a slot.", [("", counters.waiting)])
  metric("vllm:prompt_tokens", "counter", "Prompt tokens prefilled.", [("", counters.prompt_tokens)])
  metric("vllm:generation_tokens", "counter", "Tokens generated.", [("", counters.generation_tokens)])
  metric("vllm:request_success", "counter", "Finished requests by finish reason.",
         [(f'finished_reason="{reason}"', n) for reason, n in sorted(counters.finished.items())] or [("", 0)])
  metric("specjax:requests_rejected_queue_full", "counter", "Requests answered 429: the waiting queue was full.",
         [("", counters.rejected_queue_full)])
  metric("specjax:engine_steps", "counter", "Host steps of the engine (compiled step program calls).",
         [("", counters.steps)])
  metric("specjax:row_rounds", "counter", "Rounds of active rows (spec_decode_num_drafts counts the speculative "
         "ones; the adaptive policy turns speculation off as the load grows).", [("", counters.row_rounds)])
  metric("specjax:state_resizes", "counter", "Moves of the decode state to another row bucket.",
         [("", counters.state_resizes)])
  metric("specjax:drafter_catch_ups", "counter", "Times the drafter took in the tokens that autoregressive steps "
         "committed without it (the adaptive policy resuming speculation).", [("", counters.catch_ups)])
  metric("specjax:state_rows", "gauge", "Rows the decode state holds (what each step computes).",
         [("", counters.state_rows)])
  metric("vllm:spec_decode_num_drafts", "counter", "Number of spec decoding drafts.", [("", counters.num_drafts)])
  metric("vllm:spec_decode_num_draft_tokens", "counter", "Number of draft tokens.", [("", counters.num_draft_tokens)])
  metric("vllm:spec_decode_num_accepted_tokens", "counter", "Number of accepted tokens.",
         [("", counters.num_accepted_tokens)])
  metric("vllm:spec_decode_num_accepted_tokens_per_pos", "counter", "Accepted tokens per draft position.",
         [(f'position="{i}"', n) for i, n in enumerate(counters.accepted_per_pos)])
  return "\n".join(lines) + "\n"
