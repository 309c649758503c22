"""`Slots`: the engine's S decode slots. On the device, the persistent DecodeState (as many rows as a bucket of the
active requests needs); on the host, which request holds each slot, how far its tokens were delivered and its
record of rounds. It admits requests into slots (prefilled together, first tokens delivered, rows inserted),
advances the active slots by one step per sampling group, hands each request its new tokens and frees the slots of
finished ones. Only the engine's thread calls it; the table changes under the engine's lock, which other threads
take to count free slots."""

import dataclasses
import logging
import threading
import time

import jax
import numpy as np

from specjax.engine.programs import params_for
from specjax.engine.state import row_keys
from specjax.serving import calibration, programs
from specjax.serving.row_states import RowStates, admission_width
from specjax.serving.speculation import StepPolicy
from specjax.serving.metrics import EngineMetrics
from specjax.serving.request import Request, RequestHandle, RequestStats, Update
from specjax.spec import DecodeSpec

log = logging.getLogger(__name__)
# Positions per call of the drafter's catch-up (`programs.catch_up_program`).
CATCH_UP_CHUNK = 32


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
  draft_lag: int = 0               # tokens committed by steps that left the drafter behind, not yet taken in


@dataclasses.dataclass
class InFlight:
  """A dispatched step whose readout (`programs.readout`) the host has not taken yet."""

  readout: tuple
  held: dict                       # slot -> the Running that held it at the dispatch
  capacity: int
  k: int | None                    # the adaptive policy's K of the step (None: a fixed spec's)
  choice: tuple | None             # the adaptive policy's choice it ran at (`StepPolicy.choice`)
  behind: bool                     # whether the step left the drafter behind
  dispatched_at: float
  timed: bool = True               # False once an admission ran while it was in flight (its time holds the prefill)


class Slots(RowStates):
  """S slots of `size` cache positions; steps of up to `rounds` rounds. `drafted_k`: the draft positions the
  statistics keep (0 without a drafter).

  The device state (`RowStates`) holds `capacity` rows, a row bucket: slot i is row i, requests take the lowest free
  slot, the state grows to the next bucket when a request needs a row beyond it, and once the active requests fit a
  smaller bucket for `shrink_after` idle-queue steps they are moved to the lowest rows and the state shrinks. A
  step's cost follows the requests being served, not S. `pipeline`: a step is dispatched before the last one's
  readout is taken (`advance`)."""

  def __init__(self, target, drafter_params, *, slots: int, rounds: int, size: int, seed: int, drafted_k: int,
               metrics: EngineMetrics, lock: threading.Condition, shrink_after: int = 4, round_costs=None,
               calibration_context: int = 512, served_costs: bool = True, spare_states: bool = True,
               pipeline: bool = True):
    super().__init__(target, drafter_params, slots=slots, rounds=rounds, size=size, metrics=metrics,
                     spare_states=spare_states)
    self.slots, self.seed, self.drafted_k = slots, seed, drafted_k
    self.lock, self.shrink_after, self.calibration_context = lock, shrink_after, calibration_context
    self.table: list[Running | None] = [None] * slots
    self.max_new_S = np.zeros((slots,), np.int32)
    self.costs = calibration.BucketCosts(round_costs)
    self.served = calibration.ServedCosts()   # every step's time; the policy's costs follow it if served_costs
    self.served_costs = served_costs
    self.clock = time.perf_counter            # what times the steps
    self.speculation = None      # the adaptive policy's StepPolicy (K = 'auto'), made at its first step
    self._shrink_streak = 0
    self.pipeline, self.in_flight = pipeline, []
    self._taken_at = -float("inf")   # when the last readout was taken

  def free(self) -> list[int]:
    """Free slots (call under the lock)."""
    return [s for s, r in enumerate(self.table) if r is None]

  def slot_of(self, handle: RequestHandle) -> int | None:
    return next((s for s, r in enumerate(self.table) if r is not None and r.handle is handle), None)

  def shrink(self, waiting: bool) -> bool:
    """After a step: once the active requests have fit a smaller bucket for `shrink_after` steps with nobody
    waiting, moves them to the lowest rows and shrinks the state. Returns whether it did."""
    active, bucket = self._active_bucket()
    if self.state is None or waiting or bucket >= self.capacity:
      self._shrink_streak = 0
      return False
    self._shrink_streak += 1
    if self._shrink_streak < self.shrink_after:
      return False
    self._shrink_streak = 0
    self.drain()   # the readouts in flight name rows by their slots, which this renumbers (and may free some)
    active, bucket = self._active_bucket()
    with self.lock:
      moved = [self.table[s] for s in active]
      budgets = self.max_new_S[active].copy()
      self.table = moved + [None] * (self.slots - len(moved))
      self.max_new_S[:] = 0
      self.max_new_S[:len(moved)] = budgets
    self._resize(active + [-1] * (bucket - len(active)), None)
    return True

  def _active_bucket(self) -> tuple[list[int], int]:
    """The slots in use and the smallest row bucket that holds them."""
    active = [s for s, r in enumerate(self.table) if r is not None]
    return active, programs.bucket_for(max(len(active), 1), self.buckets)

  def prepare(self, spec: DecodeSpec) -> None:
    """Compiles `spec`'s step programs at every row bucket (for the adaptive policy, one per K and the drafter's
    catch-up, and its round costs there, measured by the first spec), so no request waits for a compilation later."""
    for bucket in self.buckets:
      if spec.adaptive:
        self.round_costs(spec, bucket)
      state = self.blank_state(bucket, spec)   # each program's output (its input donated) is the next one's input
      if programs.drafter_left_behind(spec, 0):
        state = programs.catch_up_program(self.drafter_params, state, np.zeros((bucket,), np.int32), spec=spec,
                                          chunk=CATCH_UP_CHUNK)
      for k in spec.k.branch_ks if spec.adaptive else (None,):   # None passed as `advance` passes it: jit keys on
        state = programs.step_program(                            # the keywords given, defaults apart
            params_for(self.target, spec), self.drafter_params, state, np.zeros((bucket,), bool),
            np.zeros((bucket,), np.int32), spec=spec, rounds=self.rounds, isolate=False, axes=self.axes, k=k)
      jax.block_until_ready(state)
    self._filled = {}   # the calibration row's caches are not kept while serving

  def round_costs(self, spec: DecodeSpec, bucket: int) -> np.ndarray:
    """An adaptive spec's round cost per K at this row bucket (measured at the first need, then as served)."""
    prior_N = self.costs.get(spec, bucket, lambda: calibration.measure(self, spec, bucket))
    return self.served.relative(bucket, spec.k.branch_ks, prior_N) if self.served_costs else prior_N

  def _step_k(self, spec: DecodeSpec, rows: list[int]) -> int | None:
    """The K of this step: the adaptive policy's choice at the current bucket's costs; None for a fixed-K spec."""
    if not spec.adaptive:
      return None
    if self.speculation is None:
      self.speculation = StepPolicy(spec.k, self.rounds, self.slots)
    tokens_left = max(int(self.max_new_S[s]) - self.table[s].completion_tokens for s in rows)
    return self.speculation.choose(self.round_costs(spec, self.capacity), tokens_left,
                                   measure_ar=self.served_costs and self.served.stale(self.capacity),
                                   unserved_ks=self.served.unserved(self.capacity, spec.k.branch_ks)
                                   if self.served_costs else ())

  def admit(self, batch: list[tuple[RequestHandle, int]], spec: DecodeSpec) -> None:
    """Prefills these (request, slot) pairs of one sampling group together (one program call of len(batch) rows, at
    the bucket of the longest prompt), delivers each first token and puts each row into its slot."""
    now = time.perf_counter()
    for flight in self.in_flight:   # its readout is taken after this prefill: its time would count the prefill
      flight.timed = False
    lengths = [len(handle.request.prompt_ids) for handle, _ in batch]
    self.grow_to_hold(max(slot for _, slot in batch), spec)
    spec = spec.replace(prompt_bucket=self.admission_bucket(max(lengths)))
    tokens_NxL = np.zeros((len(batch), admission_width(spec.prompt_bucket, self.size)), np.int32)
    for i, (handle, _) in enumerate(batch):
      tokens_NxL[i, :lengths[i]] = handle.request.prompt_ids
    keys_N = jax.numpy.concatenate([row_keys(self._seed_key(handle), 1) for handle, _ in batch])
    rows = programs.admit_program(params_for(self.target, spec), self.drafter_params, tokens_NxL,
                                  np.asarray(lengths, np.int32),
                                  np.asarray([handle.request.max_tokens for handle, _ in batch], np.int32), keys_N,
                                  spec=spec)
    self.state = programs.write_rows(self.state, rows, np.arange(len(batch), dtype=np.int32),
                                     np.asarray([slot for _, slot in batch], np.int32), axes=self.axes)
    first_N, done_N = jax.device_get((rows["tokens_BxS"][np.arange(len(batch)), np.asarray(lengths)], rows["done_B"]))
    first_token_at = time.perf_counter()
    for (handle, slot), n, first, done in zip(batch, lengths, first_N.tolist(), done_N.tolist()):
      with self.lock:
        self.table[slot] = Running(handle=handle, seq_len=n + 1, admitted_at=now, first_token_at=first_token_at,
                                   completion_tokens=1)
        self.max_new_S[slot] = handle.request.max_tokens
      self.metrics.add(prompt_tokens=n, generation_tokens=1)
      if done:
        self.finish(slot, (first,), self._stop_reason(handle.request, first))
      else:
        deliver(handle, Update((first,)))

  def _seed_key(self, handle: RequestHandle):
    """A request's own seed, else one drawn from the engine's seed and the request's id."""
    if handle.request.seed is not None:
      return jax.random.key(handle.request.seed)
    return jax.random.fold_in(jax.random.key(self.seed), handle.id)

  def advance(self, specs: dict) -> bool:
    """One step program call per sampling group of the active slots (`specs`: group -> its DecodeSpec; with several
    groups, each call masks the others out and restores their rows), then the deliveries. Pipelined (fixed K,
    autoregressive, and the adaptive policy's steps at K=0), this step is dispatched before the last one's readout
    is taken, so the host's reading and delivering runs while the device computes; a row that finished in the last
    step is then advanced once more as a done row (it emits nothing) and its slot is freed, and may be refilled,
    before this step's readout is taken, which therefore skips every slot whose request changed since the
    dispatch. The adaptive policy's drafting steps follow the last step's rounds (its K, the drafter's catch-up):
    the steps in flight are taken and K chosen again before one is dispatched, and it is taken at once."""
    with self.lock:
      groups: dict[tuple, list[int]] = {}
      for slot, running in enumerate(self.table):
        if running is not None:
          groups.setdefault(running.handle.request.group, []).append(slot)
    dispatched, capacity = [], self.capacity
    for group, rows in groups.items():
      spec = specs[group]
      k = self._step_k(spec, rows)
      if k and self.in_flight:
        self.drain()
        rows = [slot for slot in rows if self.table[slot] is not None]
        if not rows:
          continue
        k = self._step_k(spec, rows)
      active_S = np.zeros((capacity,), bool)
      active_S[rows] = True
      start = self.clock()
      self._catch_up(spec, k, rows)
      self.state = programs.step_program(params_for(self.target, spec), self.drafter_params, self.state, active_S,
                                         self.max_new_S[:capacity].copy(), spec=spec, rounds=self.rounds,
                                         isolate=len(groups) > 1, axes=self.axes, k=k)
      flight = InFlight(programs.readout(self.state), {slot: self.table[slot] for slot in rows}, capacity, k,
                        self.speculation.choice if spec.adaptive else None, programs.drafter_left_behind(spec, k),
                        start)
      if self.pipeline and not k:
        dispatched.append(flight)
      else:
        self._take(flight)
    taken = self.drain()   # pipelined, the last step's readouts, while this step runs
    self.in_flight = dispatched
    return bool(groups) or taken

  def drain(self) -> bool:
    """Takes the readout of every step in flight (the host then knows the state). Returns whether there was one."""
    pending, self.in_flight = self.in_flight, []
    for flight in pending:
      self._take(flight)
    return bool(pending)

  def _take(self, flight: "InFlight") -> None:
    """A dispatched step's readout: its time, its rounds to the policy, each row's new tokens to the request that
    held the slot at the dispatch, if it still does."""
    tokens_SxL, seq_len_S, done_S, accepted_RxS, k_R, rounds = jax.device_get(flight.readout)
    now = self.clock()   # pipelined, the step ran from when the last one's readout was taken, at the latest
    if flight.timed:
      self.served.observe(flight.capacity, self.drafted_k if flight.k is None else flight.k,
                          now - max(flight.dispatched_at, self._taken_at), int(rounds))
    self._taken_at = now
    self.metrics.add(steps=1)
    if flight.k is not None:
      self.speculation.observe(accepted_RxS[:rounds, list(flight.held)], k_R[:rounds], flight.choice)
    for slot, running in flight.held.items():
      if self.table[slot] is not running:
        continue   # finished or cancelled since the dispatch
      if flight.behind:
        running.draft_lag += int(seq_len_S[slot]) - running.seq_len
      self._collect(slot, tokens_SxL[slot], int(seq_len_S[slot]), bool(done_S[slot]), accepted_RxS[:rounds, slot],
                    k_R[:rounds])

  def reset(self) -> None:
    super().reset()
    self.in_flight = []

  def _catch_up(self, spec: DecodeSpec, k: int | None, rows: list[int]) -> None:
    """Before a step that drafts: the drafter takes in what steps without it committed (`Running.draft_lag`)."""
    if not spec.adaptive or programs.drafter_left_behind(spec, k):
      return
    lag_S = np.zeros((self.capacity,), np.int32)
    for slot in rows:
      lag_S[slot], self.table[slot].draft_lag = self.table[slot].draft_lag, 0
    if lag_S.any():
      self.state = programs.catch_up_program(self.drafter_params, self.state, lag_S, spec=spec, chunk=CATCH_UP_CHUNK)
      self.metrics.add(catch_ups=1)

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
