"""`Engine`: continuous batching with speculative decoding over S decode slots.

A request waits in a bounded queue until a slot is free; it is then prefilled, together with the requests admitted
in the same step that share its sampling group and prompt bucket (`programs.admit_program`, one compiled program per
row count and prompt bucket), its first token is delivered, and its row is inserted into the slot of a
persistent DecodeState, which holds the row bucket (1, 2, 4, ..., S rows) the active requests need, so a step
computes what is served, not S rows. Each host step runs one compiled program that advances every active slot by up
to R speculative rounds of the engine's own round (`programs.step_program`: ragged acceptance per row, as
`generate`), reads the last step's new tokens back while it runs (pipelined: the host's work hides behind the
device's), hands them to each request's stream, frees finished slots (EOS, max_tokens, cancellation) and fills free
slots from the queue. K = 'auto' runs the adaptive policy on the round costs measured at
the current row bucket: speculation turns down or off as the batch fills.

Sampling: `SamplingParams` is a compile-time constant of the engine's programs, so requests are grouped by their
setting (and by whether EOS stops them); a step runs one program call per group present, the other groups' rows
masked out and restored. Greedy requests give exactly `specjax.generate`'s tokens for the prompt alone, whatever
else is served. Sampled ones are exact in distribution; a row's random numbers depend only on its seed and its own
rounds, so a seeded request draws the same tokens whatever else is served (its first token is
`generate(..., seed=seed)`'s; later ones differ from `generate`'s, whose rounds count differently). Each new setting
compiles new programs: `max_sampling_settings` bounds how many the engine accepts.

Threads: `start()` runs the loop in a thread of its own (all JAX calls there); `submit` and `RequestHandle.cancel`
are safe from any thread. Without `start()`, a caller drives the engine with `step()` (tests do, deterministically).
The engine never imports an HTTP stack.
"""

import collections
import contextlib
import logging
import threading
import time

from specjax.cache import cache_size
from specjax.host import MIN_PROMPT_BUCKET, check_drafter, check_k, check_lengths, check_tree
from specjax.model import Model
from specjax.policy import SpeculationPolicy
from specjax.sampling import SamplingParams
from specjax.serving.metrics import EngineMetrics
from specjax.serving.request import Completion, QueueFull, Request, RequestHandle, RequestStats, Update
from specjax.serving.slots import Slots, deliver
from specjax.spec import DecodeSpec

log = logging.getLogger(__name__)

GREEDY = SamplingParams(temperature=0.0)
# The most requests one admission call prefills together (`Engine._admit_waiting`).
ADMIT_ROWS = 8


class Engine:
  """Serves requests on S slots with one drafter at a fixed K, a token tree, or K = 'auto' (the adaptive policy at
  the round costs of the rows being served: load-aware), or autoregressively without a drafter. slots: S, the rows
  of the persistent decode state; rounds_per_step: R, the most rounds per host step (a smaller R streams more
  often, a larger one pays fewer host round trips); max_queue: requests that may wait for a slot
  (`submit` raises QueueFull beyond); max_model_len: the longest prompt + completion a request may ask for (default:
  what the target and drafter hold, less K); tree: a StaticTree / DynamicTree of drafts instead of a chain;
  shrink_after: steps the active requests must fit a smaller row bucket (nobody waiting) before the state shrinks;
  round_costs: {row bucket: round cost per branch of the policy} for K = 'auto', instead of measuring them at
  warmup; calibration_context: the context length (tokens) of the rows those are measured on; served_costs: whether
  the served steps' own times refine them (`calibration.ServedCosts`; False keeps the warmup's or the given ones);
  spare_states: keep the state of each row bucket once allocated, so resizes copy rows in place (`Slots`);
  pipeline: dispatch each step before reading the last one back (not the adaptive policy's drafting steps)."""

  def __init__(self, target: Model, *, drafter=None, k=None, tree=None, slots: int = 4, rounds_per_step: int = 4,
               max_queue: int = 64, max_model_len: int | None = None, seed: int = 0, max_sampling_settings: int = 8,
               shrink_after: int = 4, round_costs: dict | None = None, calibration_context: int = 512,
               served_costs: bool = True, spare_states: bool = True, pipeline: bool = True):
    if not isinstance(target, Model):
      raise TypeError(f"target must be a specjax Model, got {type(target).__name__}")
    check_drafter(target, drafter)
    k = check_k(k, drafter) if tree is None else check_tree(tree, drafter, k)
    for name, value, low in (("slots", slots, 1), ("rounds_per_step", rounds_per_step, 1), ("max_queue", max_queue, 0),
                             ("max_sampling_settings", max_sampling_settings, 1), ("shrink_after", shrink_after, 1)):
      if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    self.target, self.drafter, self.k, self.tree = target, drafter, k, tree
    self.max_k = k.max_k if isinstance(k, SpeculationPolicy) else k if tree is None else tree.slots
    limit = min([target.config.max_seq_len] + ([drafter.max_seq_len] if drafter is not None and drafter.max_seq_len
                                               else [])) - self.max_k
    self.max_model_len = limit if max_model_len is None else int(max_model_len)
    if self.max_model_len < 2:
      raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")
    check_lengths(target, drafter, self.max_model_len, 0, self.max_k)
    self.size = cache_size(self.max_model_len + self.max_k)
    self.slots, self.rounds_per_step, self.max_queue = slots, rounds_per_step, max_queue
    self.seed, self.max_sampling_settings = seed, max_sampling_settings
    drafted_k = self.max_k if drafter is not None else 0   # draft positions the counters keep
    self.metrics = EngineMetrics(drafted_k)
    self._cond = threading.Condition()
    self._step_lock = threading.Lock()
    self._waiting: collections.deque[RequestHandle] = collections.deque()
    self._cancels: set[RequestHandle] = set()
    self._specs: dict[tuple, DecodeSpec] = {}
    if round_costs is not None and not isinstance(k, SpeculationPolicy):
      raise ValueError("round_costs are the adaptive policy's (k='auto'); this engine runs a fixed K")
    self._slots = Slots(target, drafter.params() if drafter is not None else (), slots=slots, rounds=rounds_per_step,
                        size=self.size, seed=seed, drafted_k=drafted_k, metrics=self.metrics, lock=self._cond,
                        shrink_after=shrink_after, round_costs=round_costs, calibration_context=calibration_context,
                        served_costs=served_costs, spare_states=spare_states, pipeline=pipeline)
    self._thread: threading.Thread | None = None
    self._stopping = threading.Event()
    self._paused = False

  # ---- any thread ----------------------------------------------------------------------------------------------

  def check(self, request: Request) -> None:
    """Raises ValueError naming what the engine cannot serve in `request`."""
    if not isinstance(request, Request):
      raise TypeError(f"expected a specjax.serving.Request, got {type(request).__name__}")
    ids, vocab = request.prompt_ids, self.target.config.vocab_size
    if not ids:
      raise ValueError("the prompt is empty")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
      raise ValueError(f"the prompt has token ids outside the vocabulary [0, {vocab}): {bad[:5]}")
    if len(ids) + request.max_tokens > self.max_model_len:
      raise ValueError(f"this model's maximum context length is {self.max_model_len} tokens; the request asks for "
                       f"{len(ids) + request.max_tokens} ({len(ids)} in the prompt, {request.max_tokens} in the "
                       f"completion)")
    with self._cond:
      known = set(self._specs)
    if request.group not in known and len(known) >= self.max_sampling_settings:
      settings = sorted((s.temperature, s.top_k, s.top_p, not eos) for s, eos in known)
      raise ValueError(f"the server compiles at most {self.max_sampling_settings} sampling settings and has them all; "
                       f"use one of these (temperature, top_k, top_p, ignore_eos): {settings}")

  def submit(self, request: Request, sink=None) -> RequestHandle:
    """Queues a request; returns its handle (updates go to `sink(update)` from the engine's thread, or to the
    handle's own queue). Raises ValueError for a request the engine cannot serve, QueueFull when `max_queue`
    requests already wait for a slot."""
    self.check(request)
    handle = RequestHandle(request, sink, on_cancel=self._request_cancel)
    with self._cond:
      if self._stopping.is_set():
        raise RuntimeError("the engine is stopping")
      if len(self._waiting) >= self.max_queue + len(self._slots.free()):
        self.metrics.add(rejected_queue_full=1)
        raise QueueFull(f"the queue of requests waiting for a slot is full ({self.max_queue} waiting, {self.slots} "
                        f"slots busy); retry later")
      if request.group not in self._specs:
        if len(self._specs) >= self.max_sampling_settings:
          raise ValueError(f"the server compiles at most {self.max_sampling_settings} sampling settings")
        self._specs[request.group] = self._new_spec(request)
      self._waiting.append(handle)
      self.metrics.set(waiting=len(self._waiting))
      self._cond.notify_all()
    return handle

  def generate(self, request: Request, timeout: float | None = None) -> Completion:
    return self.submit(request).result(timeout)   # (the engine must be running in its thread)

  @property
  def num_waiting(self) -> int:
    with self._cond:
      return len(self._waiting)

  @property
  def num_running(self) -> int:
    return self.slots - self.free_slots()

  def free_slots(self) -> int:
    with self._cond:
      return len(self._slots.free())

  @property
  def alive(self) -> bool:
    return self._thread is not None and self._thread.is_alive() and not self._stopping.is_set()

  def start(self) -> "Engine":
    """Runs the engine loop in its own thread."""
    if self._thread is not None:
      raise RuntimeError("the engine is already started")
    self._thread = threading.Thread(target=self._loop, name="specjax-serving-engine", daemon=True)
    self._thread.start()
    return self

  def stop(self, timeout: float = 60.0) -> None:
    """Stops the loop (after the step in progress) and cancels every waiting and running request."""
    self._stopping.set()
    with self._cond:
      self._cond.notify_all()
    if self._thread is not None and self._thread is not threading.current_thread():
      self._thread.join(timeout)
    if not self._step_lock.acquire(timeout=timeout):   # a step that hangs must not hang the shutdown too
      log.error("the engine's step did not end within %.0f s; its requests were not cancelled", timeout)
      return
    try:
      self._finish_all("cancelled")
    finally:
      self._step_lock.release()

  def pause(self) -> None:   # holds admissions and steps until `resume` (requests still queue and cancel)
    with self._cond:
      self._paused = True

  def resume(self) -> None:
    with self._cond:
      self._paused = False
      self._cond.notify_all()

  @contextlib.contextmanager
  def paused(self):
    self.pause()
    try:
      yield self
    finally:
      self.resume()

  def warmup(self, samplings=(GREEDY,), prompt_lengths=(1,), all_buckets: bool = True, admit_rows=(1,)) -> None:
    """Compiles the programs of these sampling settings and prompt lengths' buckets with throwaway requests (the
    engine stepped here: call before `start`), admitted together in each of `admit_rows` (a burst of that many is
    prefilled by one program of its own), with all_buckets the step programs at every row bucket too (and the
    adaptive policy's round costs there), the spare state of every row bucket (`RowStates.prepare_spares`) and the
    write of each such admission into each (`RowStates.prepare_writes`), then zeroes the metrics, the served steps'
    times and the adaptive policy's acceptance estimate."""
    rows_each = sorted({min(max(int(rows), 1), self.slots, ADMIT_ROWS) for rows in admit_rows})
    for sampling in samplings:
      for length in prompt_lengths:
        request = Request((0,) * length, max_tokens=min(2, self.max_model_len - length), sampling=sampling)
        for rows in rows_each:
          handles = [self.submit(request) for _ in range(rows)]
          while not all(handle.finished for handle in handles):
            self.step()
      with self._step_lock:
        self._slots.drain()   # a step in flight is read back before its state is used and the metrics reset
        if all_buckets:
          self._slots.prepare(self._specs[request.group])
    if all_buckets and not self.num_running:   # the same for every sampling setting; they overwrite rows
      with self._step_lock:
        self._slots.prepare_spares(self._specs[request.group])
        self._slots.prepare_writes(self._specs[request.group], prompt_lengths, rows_each)
    self.metrics.reset()
    self._slots.served.clear()
    self._slots.speculation = None   # the throwaway prompts' acceptance is no estimate of the served ones'

  @property
  def round_costs(self) -> dict[int, list[float]]:
    """The adaptive policy's round cost per branch at each row bucket, as measured at warmup ({} for a fixed K)."""
    return self._slots.costs.table()

  @property
  def served_round_ms(self) -> dict[int, dict[int, float]]:
    """Milliseconds per round of the served steps, by row bucket and K (the last few steps' median)."""
    return self._slots.served.table()

  # ---- the engine's thread -------------------------------------------------------------------------------------

  def step(self) -> bool:
    """One host iteration: cancellations, admissions into free slots, one step program call per sampling group of
    the active slots, deliveries. Returns whether it did anything."""
    with self._step_lock:
      with self._cond:
        cancels, self._cancels, paused = self._cancels, set(), self._paused
      worked = self._apply_cancels(cancels)
      if not paused:
        worked |= self._admit_waiting()
        with self._cond:
          specs = dict(self._specs)
        worked |= self._slots.advance(specs)
        self._slots.shrink(waiting=self.num_waiting > 0)
      else:
        worked |= self._slots.drain()   # the tokens of a step in flight still reach their requests
      self.metrics.set(running=self.num_running, waiting=self.num_waiting, state_rows=self._slots.capacity)
      return worked

  def _loop(self) -> None:
    while not self._stopping.is_set():
      try:
        worked = self.step()
      except Exception as error:  # a failed program: fail the requests it held, keep serving
        log.exception("serving engine step failed")
        with self._step_lock:
          self._finish_all("error", error=f"{type(error).__name__}: {error}")
          self._slots.reset()
        worked = False
      if not worked:
        with self._cond:
          idle = not (self._waiting or any(self._slots.table)) or self._paused
          if not self._stopping.is_set() and idle and not self._cancels:
            self._cond.wait(0.5)

  def _request_cancel(self, handle: RequestHandle) -> None:
    with self._cond:
      self._cancels.add(handle)
      self._cond.notify_all()

  def _new_spec(self, request: Request) -> DecodeSpec:
    eos = tuple(self.target.config.eos_token_ids) if request.stop_at_eos else ()
    return DecodeSpec(graphdef=self.target.graphdef, drafter=self.drafter, sampling=request.sampling, k=self.k,
                      eos_ids=eos, prompt_bucket=MIN_PROMPT_BUCKET, tree=self.tree)

  def _apply_cancels(self, cancels) -> bool:
    for handle in cancels:
      with self._cond:
        if handle in self._waiting:
          self._waiting.remove(handle)
          slot = None
        else:
          slot = self._slots.slot_of(handle)
          if slot is None:
            continue  # finished already
      if slot is None:
        self._finish_waiting(handle, "cancelled")
      else:
        self._slots.finish(slot, (), "cancelled")
    return bool(cancels)

  def _admit_waiting(self) -> bool:
    """Admits waiting requests into the free slots (lowest first, in arrival order): those of one sampling group
    and prompt bucket are prefilled together, in calls of a power of two rows (at most ADMIT_ROWS: one compiled
    program per row count), so a burst of arrivals shares its prefill's matmuls."""
    with self._cond:
      free = self._slots.free()
      taken = [(self._waiting.popleft(), slot) for slot in free[:len(self._waiting)]]
    if not taken:
      return False
    groups: dict[tuple, list] = {}
    for handle, slot in taken:
      key = (handle.request.group, self._slots.admission_bucket(len(handle.request.prompt_ids)))
      groups.setdefault(key, []).append((handle, slot))
    try:
      self._slots.grow_to_hold(taken[-1][1], self._specs[taken[0][0].request.group])
      for (group, _), pairs in groups.items():
        while pairs:
          rows = min(ADMIT_ROWS, 1 << (len(pairs).bit_length() - 1))
          self._slots.admit(pairs[:rows], self._specs[group])
          pairs = pairs[rows:]
    except Exception as error:
      for handle, _ in taken:
        if not handle.finished and self._slots.slot_of(handle) is None:
          self._finish_waiting(handle, "error", error=f"{type(error).__name__}: {error}")
      raise
    return True

  def _finish_waiting(self, handle: RequestHandle, reason: str, error: str | None = None) -> None:
    now = time.perf_counter() - handle.submitted_at
    stats = RequestStats.from_rounds([], [], prompt_tokens=len(handle.request.prompt_ids), completion_tokens=0,
                                     max_k=0, queue_s=now, first_token_s=now, total_s=now)
    self.metrics.finish(reason)
    deliver(handle, Update((), finish_reason=reason, stats=stats, error=error))

  def _finish_all(self, reason: str, error: str | None = None) -> None:
    with self._cond:
      waiting, self._waiting = list(self._waiting), collections.deque()
      slots = [s for s, r in enumerate(self._slots.table) if r is not None]
    for handle in waiting:
      self._finish_waiting(handle, reason, error)
    for slot in slots:
      self._slots.finish(slot, (), reason, error)
    self.metrics.set(running=0, waiting=0)
