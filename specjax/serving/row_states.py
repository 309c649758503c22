"""`RowStates`: the serving engine's persistent DecodeState in row buckets (1, 2, 4, ..., S rows: as many as the
active requests need, `programs.row_buckets`), its resizes between them, the blank row new rows start as, and the
states that calibration and compilation run on."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from specjax.cache import cache_size
from specjax.engine.programs import params_for
from specjax.engine.state import row_keys
from specjax.host import prompt_bucket
from specjax.serving import programs
from specjax.serving.metrics import EngineMetrics
from specjax.spec import DecodeSpec


def admission_width(bucket: int, size: int) -> int:
  """Positions of the rows an admission prefills: its prompt bucket and the first token (at most the slots' size).
  A full-size row would be allocated and written whole per admission (SmolLM2, 2048 positions: 205 ms against 86
  for a 60-token prompt); `programs.write_rows` writes this prefix into the slot, whose positions beyond it are past the
  row's length, where nothing reads (as after a rollback)."""
  return min(cache_size(bucket + 1), size)


class RowStates:
  """The state of `capacity` rows of `size` cache positions, steps of `rounds` rounds. With `spare_states`, the state
  of every bucket once allocated is kept (at most about twice the S-row state's memory), so a resize copies the kept
  rows into memory already in place: a newly allocated state is faulted in page by page (SmolLM2, 4 -> 16 rows: 3.3
  s in a serving process, against the 0.2 s of the copy)."""

  def __init__(self, target, drafter_params, *, slots: int, rounds: int, size: int, metrics: EngineMetrics,
               spare_states: bool = True):
    self.target, self.drafter_params = target, drafter_params
    self.rounds, self.size, self.metrics, self.spare_states = rounds, size, metrics, spare_states
    self.buckets = programs.row_buckets(slots)
    self.state = None            # the persistent DecodeState of `capacity` rows, built at the first admission
    self.spare: dict[int, object] = {}   # row bucket -> a kept state of that many rows, not in use
    self.blank = None            # a done one-token row: what new rows start as
    self.axes = None
    self._filled = {}            # the calibration row (while calibrating), by (spec, context)

  @property
  def capacity(self) -> int:
    return 0 if self.state is None else int(self.state.seq_len_B.shape[0])

  def _ensure_blank(self, spec: DecodeSpec) -> None:
    """The blank row (a throwaway one-token admission, done) and every row leaf's batch axis."""
    if self.blank is not None:
      return
    key = jax.random.key(0)
    params = params_for(self.target, spec)
    self.axes = programs.row_axes(params, self.drafter_params, self.size, key, spec=spec)
    tokens_1xL = np.zeros((1, self.size), np.int32)
    self.blank = programs.admit_program(params, self.drafter_params, tokens_1xL, np.ones((1,), np.int32),
                                        np.ones((1,), np.int32), row_keys(key, 1), spec=spec)

  def admission_bucket(self, length: int) -> int:
    """The prompt bucket an admission of a `length`-token prompt prefills (at most the slots' size)."""
    return min(prompt_bucket(length), self.size)

  def blank_state(self, rows: int, spec: DecodeSpec):
    """A state of `rows` blank rows (calibration and compilation run on it)."""
    self._ensure_blank(spec)
    return programs.new_state(self._resized(self.blank, [-1] * rows), self.rounds)

  def filled_state(self, rows: int, spec: DecodeSpec, context: int):
    """A state of `rows` copies of one row whose prompt is `context` tokens (target and drafter caches filled that
    far): what a step costs on rows of that context, for calibration."""
    self._ensure_blank(spec)
    context = max(1, min(context, self.size // 2))
    if (spec, context) not in self._filled:
      tokens_1xL = np.zeros((1, self.size), np.int32)
      tokens_1xL[0, :context] = 1 + np.arange(context) % (self.target.config.vocab_size - 1)   # not one token repeated
      self._filled = {(spec, context): programs.admit_program(
          params_for(self.target, spec), self.drafter_params, tokens_1xL, np.array([context], np.int32),
          np.array([self.size - context - 1], np.int32), row_keys(jax.random.key(0), 1),
          spec=spec.replace(prompt_bucket=self.admission_bucket(context)))}
    return programs.new_state(self._resized(self._filled[(spec, context)], [0] * rows), self.rounds)

  def _resized(self, rows: dict, index: list[int]) -> dict:
    return programs.resize_rows(rows, self.blank, np.asarray(index, np.int32), axes=self.axes)

  def _resize(self, index: list[int], spec: DecodeSpec | None) -> None:
    """The state becomes len(index) rows: row i is the old row index[i]; where -1, a free row (blank in a newly
    allocated state, what it last held in a spare one: free rows are masked out of every step)."""
    bucket, spare = len(index), self.spare.pop(len(index), None)
    if self.state is None:
      self.state = spare if spare is not None else self.blank_state(bucket, spec)
      return
    old, old_rows = self.state, self.capacity
    rows = programs.row_fields(old)
    self.state = None   # without spares, the old rows go as soon as the new ones exist
    if spare is None:
      self.state = programs.new_state(self._resized(rows, index), self.rounds)
    else:
      moves = [(source, row) for row, source in enumerate(index) if source >= 0]
      idle = zip(sorted(set(range(old_rows)) - set(index)), sorted(set(range(bucket)) - {row for _, row in moves}))
      moves += list(idle)[:min(old_rows, bucket) - len(moves)]   # always min(old, new) rows: one program per pair
      from_N, to_N = (np.asarray(column, np.int32) for column in zip(*moves))
      self.state = programs.write_rows(spare, rows, from_N, to_N, axes=self.axes)
    if self.spare_states:
      self.spare[old_rows] = old
    self.metrics.add(state_resizes=1)

  def grow_to_hold(self, slot: int, spec: DecodeSpec) -> None:
    """The state grows to the row bucket that holds `slot` (at once for a burst of admissions: one resize, not one
    per bucket on the way, each copying every row)."""
    self._ensure_blank(spec)
    if slot < self.capacity:
      return
    bucket = programs.bucket_for(slot + 1, self.buckets)
    self._resize(list(range(self.capacity)) + [-1] * (bucket - self.capacity), spec)

  def reset(self) -> None:
    """Forgets the device state (after a failed program: its donated buffers may be gone)."""
    self.state = None
    self.spare.clear()

  def prepare_writes(self, spec: DecodeSpec, prompt_lengths, admit_rows) -> None:
    """Compiles the write of every admission these prompt lengths' buckets and burst sizes can make into every row
    bucket's state (call with no request active: zero rows are written over free ones). The warmup's own
    admissions compile only the bucket they happen to grow to; the others compiled mid-cell (0.05-0.4 s each, 22
    of them over the sweep's first pass, SmolLM2, 2026-12-03)."""
    params, key = params_for(self.target, spec), jax.random.key(0)
    states, capacity = self._every_state(spec)
    shapes = {prompt: programs.row_shapes(params, self.drafter_params, 1, admission_width(prompt, self.size), key,
                                          spec=spec.replace(prompt_bucket=prompt))
              for prompt in {self.admission_bucket(n) for n in prompt_lengths}}
    for bucket in self.buckets:
      for prompt, rows in itertools.product(sorted(shapes), sorted({n for n in admit_rows if n <= bucket})):
        index_N = np.arange(rows, dtype=np.int32)
        fields = programs.zero_rows(shapes[prompt], rows, self.axes)   # free rows as the blank one: done, one token
        fields.update(done_B=jnp.ones((rows,), bool), seq_len_B=jnp.ones((rows,), jnp.int32))
        states[bucket] = programs.write_rows(states[bucket], fields, index_N, index_N, axes=self.axes)
    self._keep(jax.block_until_ready(states), capacity)

  def prepare_spares(self, spec: DecodeSpec) -> None:
    """With spare_states (call with no request active: rows are overwritten): a state of every row bucket, and the
    move between any two run once (a program per pair), so no resize allocates or compiles while serving."""
    if not self.spare_states:
      return
    states, capacity = self._every_state(spec)
    for old, new in itertools.permutations(self.buckets, 2):
      rows_N = np.arange(min(old, new), dtype=np.int32)
      states[new] = programs.write_rows(states[new], programs.row_fields(states[old]), rows_N, rows_N, axes=self.axes)
    self._keep(jax.block_until_ready(states), capacity)

  def _every_state(self, spec: DecodeSpec) -> tuple[dict, int]:
    """({row bucket: a state}, the bucket in use): every state taken out of the engine (the current one, the spares,
    blank ones for the rest) for programs to run on; `_keep` puts them back."""
    self._ensure_blank(spec)
    capacity, current = self.capacity, self.state
    states = {bucket: self.spare.pop(bucket, None) for bucket in self.buckets}
    states[capacity], self.state = current, None
    return {bucket: self.blank_state(bucket, spec) if states[bucket] is None else states[bucket]
            for bucket in self.buckets}, capacity

  def _keep(self, states: dict, capacity: int) -> None:
    """The states of `_every_state` back: the bucket that was in use in use again, the others spare (with
    spare_states)."""
    self.state = states.pop(capacity, None)
    self.spare = states if self.spare_states else {}
