"""The serving engine's compiled programs, composed from `specjax.engine`'s phases (no second round, sampling or
rejection lives here):

- `admit_program`: the prefill of requests admitted together and their drafter's (one compilation per row count,
  prompt bucket and decode spec), giving their rows of a DecodeState;
- `write_rows`: those rows written into their slots of the persistent DecodeState (buffers donated), or its kept
  rows into a state of another size (a row bucket, `row_buckets`) already allocated, so a step computes only as
  many rows as the active requests need;
- `resize_rows`: the same move into a newly allocated state;
- `catch_up_program`: the drafter takes in the tokens committed while steps ran without it;
- `step_program`: every active row advanced by up to R rounds of the engine's round (fixed K, a token tree, or, for
  the adaptive policy, the K the host chose for this step: `specjax.serving.speculation`), in one bounded
  `lax.while_loop` (it stops after R rounds or when every active row is done), so tokens can stream;
- `readout`: copies of what the host reads after a step, so the next step can be dispatched (taking the state,
  donated) before the host has read them.

Inactive rows (free, or of another sampling group) are marked done for the step, so they emit nothing; with
`isolate` their whole row is restored afterwards, because a drafter may update its state of a done row.
"""

import functools

import jax
import jax.numpy as jnp

from specjax.engine.programs import round_body, traced
from specjax.engine.round import init_drafter, prefill, speculative_round
from specjax.engine.state import DecodeState, empty_round_log, unfinished
from specjax.spec import DecodeSpec

# The DecodeState fields that belong to one request's row (the rest is the step's round log).
ROW_FIELDS = ("tokens_BxS", "seq_len_B", "n_new_B", "done_B", "cache", "draft_state", "row_keys_B")


def row_fields(state) -> dict:
  """A state's row fields (`ROW_FIELDS`) by name."""
  return {name: getattr(state, name) for name in ROW_FIELDS}


def admit_row(target_params, drafter_params, tokens_BxS, prompt_len_B, max_new_B, row_keys_B, *,
              spec: DecodeSpec) -> dict:
  """The prompt through the target (first token sampled) and the drafter's own prefill: the request's row fields
  (`ROW_FIELDS`). row_keys_B: each row's random key, as `engine.row_keys` gives it (prefill draws the first token
  from fold_in(key, 0), rounds from fold_in(key, round))."""
  with traced(spec, target_params) as target:
    state = prefill(target, tokens_BxS, prompt_len_B, max_new_B, row_keys_B, spec=spec.prefill, max_rounds=1)
    state = init_drafter(spec.drafter, drafter_params, state, prompt_len_B, spec.prompt_bucket)
  return row_fields(state)


admit_program = jax.jit(admit_row, static_argnames=("spec",))


def row_shapes(target_params, drafter_params, rows: int, width: int, key, *, spec: DecodeSpec):
  """The shapes (`jax.ShapeDtypeStruct`) of an admission's row fields: `rows` rows of `width` positions."""
  tokens = jax.ShapeDtypeStruct((rows, width), jnp.int32)
  lengths = jax.ShapeDtypeStruct((rows,), jnp.int32)
  keys = jax.eval_shape(lambda: jax.random.split(key, rows))
  return jax.eval_shape(functools.partial(admit_row, spec=spec), target_params, drafter_params, tokens, lengths,
                        lengths, keys)


def zero_rows(shapes, rows: int, axes: tuple) -> dict:
  """Row fields of one row's shapes (`row_shapes`) widened to `rows` rows along their batch axes (`row_axes`), all
  zero (keys: any key): what compiles `write_rows` without a prefill."""
  def zero(shape, axis):
    dims = shape.shape if axis is None else shape.shape[:axis] + (rows,) + shape.shape[axis + 1:]
    if jax.dtypes.issubdtype(shape.dtype, jax.dtypes.prng_key):
      return jax.random.split(jax.random.key(0), dims)
    return jnp.zeros(dims, shape.dtype)

  leaves, treedef = jax.tree.flatten(shapes)
  return jax.tree.unflatten(treedef, [zero(leaf, axis) for leaf, axis in zip(leaves, axes)])


def row_axes(target_params, drafter_params, size: int, key, *, spec: DecodeSpec) -> tuple:
  """The batch axis of every leaf of a row (`jax.tree.leaves` order; None: a leaf without one), found by tracing
  the admission at batch 1 and 2 (a drafter's state may keep its batch on any axis, e.g. a KV cache's second)."""
  axes = []
  for one, two in zip(*(jax.tree.leaves(row_shapes(target_params, drafter_params, batch, size, key, spec=spec))
                        for batch in (1, 2))):
    differ = [i for i, (a, b) in enumerate(zip(one.shape, two.shape)) if a != b]
    if len(differ) > 1 or len(one.shape) != len(two.shape):
      raise ValueError(f"a decode state leaf of shape {one.shape} at batch 1 / {two.shape} at batch 2 has no single "
                       f"batch axis; the serving engine cannot give it slots")
    axes.append(differ[0] if differ else None)
  return tuple(axes)


def row_buckets(slots: int) -> tuple[int, ...]:
  """The row counts the persistent state takes: powers of two below `slots`, and `slots`."""
  return tuple(b for b in (1 << i for i in range(slots.bit_length())) if b < slots) + (slots,)


def bucket_for(rows: int, buckets: tuple[int, ...]) -> int:
  """The smallest bucket that holds `rows` rows."""
  return next(b for b in buckets if b >= rows)


def _key_safe(fn, leaf, *others):
  """fn on the leaves' data (PRNG key arrays through their raw key data, which jnp.take / where accept)."""
  if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
    impl = jax.random.key_impl(leaf)
    return jax.random.wrap_key_data(fn(jax.random.key_data(leaf), *map(jax.random.key_data, others)), impl=impl)
  return fn(leaf, *others)


@functools.partial(jax.jit, static_argnames=("axes",))
def resize_rows(rows: dict, blank: dict, index_N, *, axes: tuple) -> dict:
  """Row fields of N rows: row i is rows' row index_N[i], or the blank (batch-1) row where index_N[i] < 0."""
  def gather(leaf, blank_leaf, axis):
    # row by row: XLA:CPU gathers (jnp.take) element by element, 0.8 s for 16 SmolLM2 rows of 2048 positions
    rows = [jnp.where(index_N[i] >= 0, jax.lax.dynamic_slice_in_dim(leaf, jnp.maximum(index_N[i], 0), 1, axis),
                      blank_leaf) for i in range(index_N.shape[0])]
    return jnp.concatenate(rows, axis=axis)

  leaves, treedef = jax.tree.flatten(rows)
  return jax.tree.unflatten(treedef, [leaf if axis is None else _key_safe(functools.partial(gather, axis=axis), leaf, b)
                                      for leaf, b, axis in zip(leaves, jax.tree.leaves(blank), axes)])


def new_state(rows: dict, rounds: int) -> DecodeState:
  """A DecodeState of these row fields with an empty round log of `rounds` rounds."""
  return DecodeState(**rows, **empty_round_log(rounds, rows["seq_len_B"].shape[0]))


@functools.partial(jax.jit, static_argnames=("axes",), donate_argnames=("slots",))
def write_rows(slots: DecodeState, rows: dict, from_N, to_N, *, axes: tuple) -> DecodeState:
  """Row from_N[i] of `rows` (row fields) written over row to_N[i] of the state, in place (buffers donated): one
  row update each (a scatter of N rows runs element by element on XLA's CPU backend). Admissions write their new
  rows into their slots; resizes into a state already allocated move the kept rows (`RowStates`' spare states). Rows
  narrower than the state (`row_states.admission_width`) fill their prefix; the row keeps what lies past it."""
  def put(leaf, new, axis):
    for i in range(from_N.shape[0]):
      row = jax.lax.dynamic_slice_in_dim(new, from_N[i], 1, axis=axis)
      leaf = jax.lax.dynamic_update_slice_in_dim(leaf, row, to_N[i], axis)
    return leaf

  old_leaves, treedef = jax.tree.flatten(row_fields(slots))
  new_leaves = [leaf if axis is None else _key_safe(functools.partial(put, axis=axis), leaf, new)
                for leaf, new, axis in zip(old_leaves, jax.tree.leaves(rows), axes)]
  return slots.replace(**jax.tree.unflatten(treedef, new_leaves))


def _select_rows(active_S, new, old, axes):
  """Row by row: `new` where active_S, else `old` (leaves along their batch axes)."""
  def select(a, b, axis):
    return jnp.where(active_S.reshape((1,) * axis + (-1,) + (1,) * (a.ndim - axis - 1)), a, b)

  new_leaves, treedef = jax.tree.flatten(new)
  return jax.tree.unflatten(treedef, [a if axis is None else _key_safe(functools.partial(select, axis=axis), a, b)
                                      for a, b, axis in zip(new_leaves, jax.tree.leaves(old), axes)])


def drafter_left_behind(spec: DecodeSpec, k: int | None) -> bool:
  """Whether a step at K runs without the drafter: an adaptive spec's autoregressive steps whose drafter can catch
  up later (`Drafter.catches_up`; a draft model then costs nothing while speculation is off)."""
  return spec.adaptive and k == 0 and spec.drafter is not None and spec.drafter.catches_up


@functools.partial(jax.jit, static_argnames=("spec", "chunk"), donate_argnames=("slots",))
def catch_up_program(drafter_params, slots: DecodeState, lag_S, *, spec: DecodeSpec, chunk: int) -> DecodeState:
  """The drafter takes in the last lag_S[s] committed tokens before seq_len - 2 of every row (what the steps that
  left it behind committed), `chunk` positions per call of `Drafter.catch_up`. A row whose lag is shorter re-takes
  committed positions it already holds (the same tokens at the same positions), so every row runs every chunk."""
  end_S = slots.seq_len_B - 2
  chunks = (jnp.max(lag_S) + chunk - 1) // chunk
  offsets_1xC = jnp.arange(chunk, dtype=jnp.int32)[None, :]

  def body(carry):
    i, draft_state = carry
    start_S = jnp.maximum(jnp.minimum(end_S - lag_S + i * chunk, end_S - chunk), 0)
    positions_SxC = start_S[:, None] + offsets_1xC
    return i + 1, spec.drafter.catch_up(drafter_params, draft_state, slots.tokens_BxS, positions_SxC)

  _, draft_state = jax.lax.while_loop(lambda carry: carry[0] < chunks, body, (jnp.int32(0), slots.draft_state))
  return slots.replace(draft_state=draft_state)


@functools.partial(jax.jit, static_argnames=("spec", "rounds", "isolate", "axes", "k"), donate_argnames=("slots",))
def step_program(target_params, drafter_params, slots: DecodeState, active_S, max_new_S, *, spec: DecodeSpec,
                 rounds: int, isolate: bool, axes: tuple, k: int | None = None) -> DecodeState:
  """Up to `rounds` rounds of every active row (active_S; budgets max_new_S). The returned state's round log
  (`round`, `accepted_RxB`, `emitted_RxB`, `k_R`) covers this step only; each row's key moves on, so the next step
  draws fresh random numbers (rounds use fold_in(key, 1..rounds), the next key is fold_in(key, rounds + 1)). An
  adaptive spec runs the chain round at `k`, the host's choice for this step (0: autoregressive; without the
  drafter where it can catch up later, `drafter_left_behind`, else with it kept in step)."""
  if spec.adaptive == (k is None):
    raise ValueError(f"k is the step's K of an adaptive spec (one of {getattr(spec.k, 'branch_ks', ())}) and only "
                     f"that; got k={k!r} for k={spec.k!r}")
  batch = active_S.shape[0]
  start = slots.replace(done_B=slots.done_B | ~active_S, **empty_round_log(rounds, batch))
  with traced(spec, target_params) as target:
    if spec.adaptive:
      drafter = None if drafter_left_behind(spec, k) else spec.drafter
      body = functools.partial(speculative_round, target, drafter, drafter_params, max_new_B=max_new_S, k=k,
                               sampling=spec.sampling, eos_ids=spec.eos_ids)
    else:
      body = round_body(target, spec, drafter_params, max_new_S)
    out = jax.lax.while_loop(unfinished, lambda state: body(state=state), start)
  row_keys_B = jax.vmap(lambda key: jax.random.fold_in(key, rounds + 1))(out.row_keys_B)
  out = out.replace(done_B=jnp.where(active_S, out.done_B, slots.done_B), row_keys_B=row_keys_B)
  if isolate:
    rows = _select_rows(active_S, row_fields(out), row_fields(slots), axes)
    out = out.replace(**rows)
  return out


@jax.jit
def readout(slots: DecodeState) -> tuple:
  """(tokens_BxS, seq_len_B, done_B, accepted_RxB, k_R, round) of a state, copied: a step dispatched on the state
  donates its buffers, and the host reads these while that step runs (`Slots.advance`, pipelined)."""
  return tuple(jnp.copy(x) for x in (slots.tokens_BxS, slots.seq_len_B, slots.done_B, slots.accepted_RxB, slots.k_R,
                                     slots.round))
