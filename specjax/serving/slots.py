"""`Slots`: the engine's S decode slots. On the device, the persistent S-row DecodeState; on the host, which request
holds each slot, how far its tokens were delivered and its record of rounds. It admits a request into a slot
(prefill alone, first token delivered, row inserted), advances the active slots by one step per sampling group, hands
each request its new tokens and frees the slots of finished ones. Only the engine's thread calls it; the table
changes under the engine's lock, which other threads take to count free slots."""

import dataclasses
import logging
import threading
import time

import jax
import numpy as np

from specjax.engine.programs import params_for
from specjax.engine.state import row_keys
from specjax.host import prompt_bucket
from specjax.serving import programs
from specjax.serving.metrics import EngineMetrics
from specjax.serving.request import Request, RequestHandle, RequestStats, Update
from specjax.spec import DecodeSpec

log = logging.getLogger(__name__)


def deliver(handle: RequestHandle, update: Update) -> None:
  """Hands an update to its request's sink; a consumer's failure never stops the engine."""
  try:
    handle.deliver(update)
  except Exception:
    log.exception("delivering an update of request %d failed", handle.id)


@dataclasses.dataclass
class Running:
  """A request in a slot: where its row stands on the host, and its record of rounds."""

  handle: RequestHandle
  seq_len: int                     # tokens of its row already delivered (prompt included)
  admitted_at: float
  first_token_at: float
  accepted: list = dataclasses.field(default_factory=list)
  k: list = dataclasses.field(default_factory=list)
  completion_tokens: int = 0


class Slots:
  """S slots of `size` cache positions; steps of up to `rounds` rounds. `drafted_k`: the draft positions the
  statistics keep (0 without a drafter)."""

  def __init__(self, target, drafter_params, *, slots: int, rounds: int, size: int, seed: int, drafted_k: int,
               metrics: EngineMetrics, lock: threading.Condition):
    self.target, self.drafter_params = target, drafter_params
    self.slots, self.rounds, self.size, self.seed, self.drafted_k = slots, rounds, size, seed, drafted_k
    self.metrics, self.lock = metrics, lock
    self.table: list[Running | None] = [None] * slots
    self.max_new_S = np.zeros((slots,), np.int32)
    self.state = None            # the S-row DecodeState, built at the first admission
    self.axes = None

  def free(self) -> list[int]:
    """Free slots (call under the lock)."""
    return [s for s, r in enumerate(self.table) if r is None]

  def slot_of(self, handle: RequestHandle) -> int | None:
    return next((s for s, r in enumerate(self.table) if r is not None and r.handle is handle), None)

  def _ensure_state(self, spec: DecodeSpec) -> None:
    """The S-row state, built from a throwaway one-token row in every slot (all done)."""
    if self.state is not None:
      return
    key = jax.random.key(0)
    self.axes = programs.row_axes(params_for(self.target, spec), self.drafter_params, self.size, key, spec=spec)
    tokens_1xL = np.zeros((1, self.size), np.int32)
    params = params_for(self.target, spec)
    row = programs.admit_program(params, self.drafter_params, tokens_1xL, np.ones((1,), np.int32),
                                 np.ones((1,), np.int32), row_keys(key, 1), spec=spec)
    self.state = programs.empty_log(programs.stack_rows(row, self.slots, self.axes), self.rounds)

  def reset(self) -> None:
    """Forgets the device state (after a failed program: its donated buffers may be gone)."""
    self.state = None

  def admit(self, handle: RequestHandle, slot: int, spec: DecodeSpec) -> None:
    """Prefills `handle`'s request alone, delivers its first token and puts its row into `slot`."""
    request, now = handle.request, time.perf_counter()
    n = len(request.prompt_ids)
    self._ensure_state(spec)
    spec = spec.replace(prompt_bucket=min(prompt_bucket(n), self.size))
    tokens_1xL = np.zeros((1, self.size), np.int32)
    tokens_1xL[0, :n] = request.prompt_ids
    seed_key = (jax.random.key(request.seed) if request.seed is not None
                else jax.random.fold_in(jax.random.key(self.seed), handle.id))
    params = params_for(self.target, spec)
    row = programs.admit_program(params, self.drafter_params, tokens_1xL, np.array([n], np.int32),
                                 np.array([request.max_tokens], np.int32), row_keys(seed_key, 1), spec=spec)
    self.state = programs.insert_program(self.state, row, np.int32(slot), axes=self.axes)
    first, done = jax.device_get((row["tokens_BxS"][0, n], row["done_B"][0]))
    running = Running(handle=handle, seq_len=n + 1, admitted_at=now, first_token_at=time.perf_counter(),
                      completion_tokens=1)
    with self.lock:
      self.table[slot] = running
      self.max_new_S[slot] = request.max_tokens
    self.metrics.add(prompt_tokens=n, generation_tokens=1)
    if done:
      self.finish(slot, (int(first),), self._stop_reason(request, int(first)))
    else:
      deliver(handle, Update((int(first),)))

  def advance(self, specs: dict) -> bool:
    """One step program call per sampling group of the active slots (`specs`: group -> its DecodeSpec; with several
    groups, each call masks the others out and restores their rows), then the deliveries."""
    with self.lock:
      groups: dict[tuple, list[int]] = {}
      for slot, running in enumerate(self.table):
        if running is not None:
          groups.setdefault(running.handle.request.group, []).append(slot)
    for group, rows in groups.items():
      active_S = np.zeros((self.slots,), bool)
      active_S[rows] = True
      params = params_for(self.target, specs[group])
      self.state = programs.step_program(params, self.drafter_params, self.state, active_S,
                                         self.max_new_S.copy(), spec=specs[group], rounds=self.rounds,
                                         isolate=len(groups) > 1, axes=self.axes)
      s = self.state
      tokens_SxL, seq_len_S, done_S, accepted_RxS, k_R, rounds = jax.device_get(
          (s.tokens_BxS, s.seq_len_B, s.done_B, s.accepted_RxB, s.k_R, s.round))
      self.metrics.add(steps=1)
      for slot in rows:
        self._collect(slot, tokens_SxL[slot], int(seq_len_S[slot]), bool(done_S[slot]), accepted_RxS[:rounds, slot],
                      k_R[:rounds])
    return bool(groups)

  def _collect(self, slot: int, tokens_L, seq_len: int, done: bool, accepted_R, k_R) -> None:
    """A row's new tokens and rounds after a step: to its stream, its record and the counters."""
    running = self.table[slot]
    new = tuple(int(t) for t in tokens_L[running.seq_len:seq_len])
    running.seq_len = seq_len
    active = accepted_R >= 0
    running.accepted.extend(accepted_R[active].tolist())
    running.k.extend(k_R[active].tolist())
    running.completion_tokens += len(new)
    self.metrics.record_rounds(accepted_R[active], k_R[active])
    self.metrics.add(generation_tokens=len(new))
    if done:
      self.finish(slot, new, self._stop_reason(running.handle.request, new[-1] if new else None))
    elif new:
      deliver(running.handle, Update(new))

  def _stop_reason(self, request: Request, last: int | None) -> str:
    eos = request.stop_at_eos and last is not None and last in self.target.config.eos_token_ids
    return "stop" if eos else "length"

  def finish(self, slot: int, new: tuple, reason: str, error: str | None = None) -> None:
    """The request in `slot` ends: its slot is freed, its last update (with stats) delivered."""
    with self.lock:
      running, self.table[slot] = self.table[slot], None
      self.max_new_S[slot] = 0
    now, handle = time.perf_counter(), running.handle
    stats = RequestStats.from_rounds(
        running.accepted, running.k, prompt_tokens=len(handle.request.prompt_ids),
        completion_tokens=running.completion_tokens, max_k=self.drafted_k,
        queue_s=running.admitted_at - handle.submitted_at, first_token_s=running.first_token_at - handle.submitted_at,
        total_s=now - handle.submitted_at)
    self.metrics.finish(reason)
    deliver(handle, Update(new, finish_reason=reason, stats=stats, error=error))
