"""What a caller hands the serving engine (`Request`), what it gets back while the request runs (`Update`s, the last
one with `RequestStats`), and the handle between the two (`RequestHandle`: cancel, or read the updates).

The engine delivers updates from its own thread through the handle's `sink`; the default sink is a thread-safe
queue that `updates()` / `result()` read, and a server passes its own (e.g. one that hops onto an asyncio loop)."""

import dataclasses
import itertools
import queue
import threading
import time
from typing import Callable, Iterator

import numpy as np

from specjax import stats as stats_lib
from specjax.sampling import SamplingParams

FINISH_REASONS = ("stop", "length", "cancelled", "error")


class QueueFull(RuntimeError):
  """The engine's queue of waiting requests is at its bound (`max_queue`): retry later (HTTP 429)."""


@dataclasses.dataclass(frozen=True)
class Request:
  """One generation: token ids of the prompt, the budget of new tokens, the sampling setting, an optional seed (the
  same seed and prompt give the same tokens as `specjax.generate(..., seed=seed)` for the first token and the same
  distribution after it), and whether EOS ends it."""

  prompt_ids: tuple[int, ...]
  max_tokens: int
  sampling: SamplingParams = SamplingParams()
  seed: int | None = None
  stop_at_eos: bool = True

  def __post_init__(self):
    object.__setattr__(self, "prompt_ids", tuple(int(t) for t in np.asarray(self.prompt_ids).reshape(-1).tolist()))
    if not isinstance(self.sampling, SamplingParams):
      raise TypeError(f"sampling must be a SamplingParams, got {type(self.sampling).__name__}")
    if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, (int, np.integer)) or self.max_tokens < 1:
      raise ValueError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
    if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer))
                                  or not -2**63 <= self.seed < 2**63):
      raise ValueError(f"seed must be a 64-bit int or None, got {self.seed!r}")

  @property
  def group(self) -> tuple:
    """What the compiled programs depend on: requests of one group share a step program."""
    return (self.sampling, self.stop_at_eos)


@dataclasses.dataclass(frozen=True)
class RequestStats:
  """One request's speculation and timing. A round is one verification call of the request's row; it proposed k
  drafts and accepted some of them (`specjax.stats` has the definitions): acceptance_rate = accepted / proposed
  drafts; mean_acceptance_length = 1 + accepted / rounds (tokens per round, vLLM's convention)."""

  prompt_tokens: int
  completion_tokens: int
  rounds: int
  draft_tokens: int
  accepted_tokens: int
  acceptance_rate: float | None
  mean_acceptance_length: float | None
  accepted_per_position: tuple[int, ...]   # rounds that accepted draft i (i = 1..K)
  queue_s: float                           # submission -> admission
  first_token_s: float                     # submission -> first token
  total_s: float                           # submission -> finish

  @classmethod
  def from_rounds(cls, accepted_N, k_N, *, prompt_tokens: int, completion_tokens: int, max_k: int,
                  queue_s: float, first_token_s: float, total_s: float) -> "RequestStats":
    accepted_N, k_N = np.asarray(accepted_N, np.int64), np.asarray(k_N, np.int64)
    per_position = tuple(int((accepted_N > i).sum()) for i in range(max_k))
    return cls(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
               rounds=stats_lib.active_row_rounds(accepted_N), draft_tokens=stats_lib.proposed_drafts(k_N),
               accepted_tokens=stats_lib.accepted_drafts(accepted_N),
               acceptance_rate=stats_lib.acceptance_rate(accepted_N, k_N),
               mean_acceptance_length=stats_lib.tokens_per_round(accepted_N), accepted_per_position=per_position,
               queue_s=queue_s, first_token_s=first_token_s, total_s=total_s)

  def as_dict(self) -> dict:
    return dataclasses.asdict(self) | {"accepted_per_position": list(self.accepted_per_position)}


@dataclasses.dataclass(frozen=True)
class Update:
  """New tokens of a request since its last update; the last update has `finish_reason` ("stop": EOS, "length":
  max_tokens, "cancelled", "error" with `error`) and `stats`."""

  token_ids: tuple[int, ...]
  finish_reason: str | None = None
  stats: RequestStats | None = None
  error: str | None = None

  @property
  def finished(self) -> bool:
    return self.finish_reason is not None


@dataclasses.dataclass(frozen=True)
class Completion:
  """A finished request, as `RequestHandle.result` gathers it."""

  token_ids: list[int]
  finish_reason: str
  stats: RequestStats | None
  error: str | None = None


_ids = itertools.count()


class RequestHandle:
  """A submitted request: `cancel()` from any thread; without a sink of the caller's, `updates()` / `result()` read
  what the engine delivered."""

  def __init__(self, request: Request, sink: Callable[[Update], None] | None = None, on_cancel=None):
    self.id = next(_ids)
    self.request = request
    self.submitted_at = time.perf_counter()
    self._queue: queue.Queue | None = None if sink is not None else queue.Queue()
    self._sink = sink if sink is not None else self._queue.put
    self._on_cancel = on_cancel
    self._finished = threading.Event()

  @property
  def finished(self) -> bool:
    return self._finished.is_set()

  def cancel(self) -> None:
    """Asks the engine to drop the request (waiting or running) and free its slot; a no-op once finished."""
    if not self.finished and self._on_cancel is not None:
      self._on_cancel(self)

  def deliver(self, update: Update) -> None:
    """Called by the engine (its thread): hands the update to the sink; nothing after the final one."""
    if self.finished:
      return
    if update.finished:
      self._finished.set()
    self._sink(update)

  def updates(self, timeout: float | None = None) -> Iterator[Update]:
    """The updates as they come, up to the final one (default sink only)."""
    if self._queue is None:
      raise RuntimeError("this handle delivers to its own sink")
    while True:
      update = self._queue.get(timeout=timeout)
      yield update
      if update.finished:
        return

  def available(self) -> list[Update]:
    """The updates delivered so far and not yet read, without waiting (default sink only)."""
    if self._queue is None:
      raise RuntimeError("this handle delivers to its own sink")
    out = []
    while not self._queue.empty():
      out.append(self._queue.get_nowait())
    return out

  def result(self, timeout: float | None = None) -> Completion:
    tokens = []
    for update in self.updates(timeout):
      tokens.extend(update.token_ids)
    return Completion(token_ids=tokens, finish_reason=update.finish_reason, stats=update.stats, error=update.error)
