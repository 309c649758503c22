"""Packed float32 weights: a Linear kernel W [K, N] (or a tied embedding [N, K] used as the head) kept beside its
column tiles [T, K, 48], so that 1..64 rows stream each weight once, front to back (`cpu_packed.cc`).

`packed_params(model)` is the view of a Model's parameters that the engine's unsharded CPU programs run on: every
2-D float32 `kernel` and a tied `embed` become a `PackedKernel` that holds the original array (for XLA's dot on
prefill-sized blocks and for the embedding lookup) and its tiles (for the kernel). It is made once per Model, costs
the weights' bytes again, and leaves the Model as it was: checkpoints, sharding, drafters and training see the
plain parameters. Sibling kernels that read one input (q, k, v; gate, up) are packed together: the first holds the
tiles of all of them side by side and one kernel call computes the group (`dense_group`): 4 calls a layer, not 7
(SmolLM2, one row: those matmuls 7% faster, a whole decode step about 1%, docs/diagnostics/fused_projections.py).

Which kernel wins at a few rows depends on the CPU (a Zen 4 core: packed from one row; an Intel AVX-512 Xeon: the
plain one at 1-2 rows on 4 KB pages, the packed one from one row since its tiles moved to 2 MB pages at load,
`host_memory.back_with_huge_pages`; docs/results.md sections 43-45), so `packed_params` times both over the model's
own weights (`calibrate`, once per CPU, kernels and shapes: `calibration_cache`) and rows below the view's
`min_rows` take the plain skinny kernel (`cpu_linear.cc`).
"""

import functools
import itertools
import logging
import math
import os
import statistics
import time
import weakref

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from specjax import host_memory
from specjax.kernels import build, calibration_cache
from specjax.kernels import linear

log = logging.getLogger(__name__)
TILE = 48        # cpu_packed.cc's kTile
MAX_ROWS = 64    # cpu_packed.cc's kMaxRows
# Sibling Dense modules that read one input: the packed view keeps each group's tiles in its first kernel.
FUSED = (("q", "k", "v"), ("gate", "up"))


@flax.struct.dataclass
class PackedKernel:
  """W and its tiles. `kernel` is W [K, N], or the table [N, K] when `transposed` (a tied embedding). The first
  kernel of a fused group (`FUSED`) holds the tiles of the group's kernels side by side and `group`, their widths;
  the others hold no tiles (None) and their place in the group (`member`)."""

  kernel: jax.Array
  tiles: jax.Array | None
  transposed: bool = flax.struct.field(pytree_node=False, default=False)
  group: tuple = flax.struct.field(pytree_node=False, default=())
  member: int = flax.struct.field(pytree_node=False, default=0)
  min_rows: int = flax.struct.field(pytree_node=False, default=1)   # fewer rows take the plain kernel (`calibrate`)

  def __getitem__(self, index):
    if index is Ellipsis:  # nnx.Variable's `param[...]`
      return self
    raise TypeError("a PackedKernel is read whole (param[...]); index its .kernel")

  @property
  def n_out(self) -> int:
    return self.kernel.shape[0 if self.transposed else 1]


def pack(w_KxN: jax.Array) -> jax.Array:
  """W [K, N] as tiles [ceil(N / 48), K, 48], the last tile zero-padded."""
  k, n = w_KxN.shape
  tiles = -(-n // TILE)
  padded = jnp.pad(w_KxN, ((0, 0), (0, tiles * TILE - n)))
  return padded.reshape(k, tiles, TILE).transpose(1, 0, 2)


def pack_rows(table_NxK: jax.Array) -> jax.Array:
  """The tiles of table.T (a tied embedding [N, K] as the head) in one transpose, without a transposed copy."""
  n, k = table_NxK.shape
  tiles = -(-n // TILE)
  padded = jnp.pad(table_NxK, ((0, tiles * TILE - n), (0, 0)))
  return padded.reshape(tiles, TILE, k).transpose(0, 2, 1)


def plain(w):
  """The array a weight stands for: a PackedKernel's original, anything else itself."""
  return w.kernel if isinstance(w, PackedKernel) else w


def available() -> bool:
  """Whether packed weights pay here: the CPU kernels are built and on, and the CPU has AVX-512 (at trace time)."""
  return build.has_avx512() and linear.kernels_enabled()


MIN_ROWS_ENV = "SPECJAX_PACKED_MIN_ROWS"
LADDER = (1, 2, 5, 9, 17)   # the row counts `calibrate` times: a step, chains of K = 1 / 4 / 8, a 16-node tree


def env_min_rows() -> int | None:
  """$SPECJAX_PACKED_MIN_ROWS (the fewest rows the packed kernel takes, for every model), else None."""
  env = os.environ.get(MIN_ROWS_ENV, "").strip()
  if not env:
    return None
  if not env.isdigit() or not 1 <= int(env) <= MAX_ROWS:
    raise ValueError(f"{MIN_ROWS_ENV}={env!r}: must be a row count in 1..{MAX_ROWS}")
  return int(env)


def threshold(seconds_by_rows: dict) -> int:
  """The fewest rows from which the packed kernel is faster at every timed row count: {rows: (plain s, packed s)}
  -> min_rows (past the plain kernel's linear.MAX_ROWS the packed one always runs: XLA's dot is the alternative)."""
  start = linear.MAX_ROWS + 1
  for r in sorted(seconds_by_rows, reverse=True):
    plain_s, packed_s = seconds_by_rows[r]
    if packed_s >= plain_s:
      break
    start = r
  return start


def _product(x, w: "PackedKernel", use_tiles: bool):
  """x @ w by the packed kernel on w's tiles (a fused group's tiles hold all of it) or the plain one on w itself."""
  if use_tiles:
    return _kernel_call(x, w.tiles, w.tiles.shape[0] * TILE)
  return linear.dense(x, w.kernel, transposed=w.transposed)


@functools.partial(jax.jit, static_argnames="use_tiles")
def _every_product(weights: list, xs_by_k: dict, use_tiles: bool):
  """Rows multiplied by every weight of a model once, as a decode step streams them: the packed kernel on each
  tiled weight, or the plain kernel on each original."""
  total = jnp.float32(0)
  for w in weights:
    if use_tiles and w.tiles is None:
      continue
    k = w.tiles.shape[1] if use_tiles else w.kernel.shape[1 if w.transposed else 0]
    total = total + _product(xs_by_k[k], w, use_tiles)[0, 0]
  return total


def calibrate(weights: list, repeats: int = 3, calls: int = 2) -> dict:
  """{rows: (plain s, packed s)} per LADDER row count: median seconds of one pass over all `weights` (a model's
  PackedKernels) with each kernel, the two alternated, so that the weights stream from memory as in a step."""
  dims = {w.tiles.shape[1] for w in weights if w.tiles is not None}
  passes = [functools.partial(_every_product, weights, use_tiles=use) for use in (False, True)]
  seconds = {}
  for rows in LADDER:
    xs = {k: jax.random.normal(jax.random.key(k), (rows, k), jnp.float32) for k in dims}
    samples: tuple = ([], [])
    for fn in passes:
      jax.block_until_ready(fn(xs))
    for _ in range(repeats):
      for fn, out in zip(passes, samples):
        start = time.perf_counter()
        for _ in range(calls):
          jax.block_until_ready(fn(xs))
        out.append((time.perf_counter() - start) / calls)
    seconds[rows] = tuple(statistics.median(s) for s in samples)
  _every_product.clear_cache()   # its programs serve no later call
  return seconds


def _min_rows(w: PackedKernel) -> int:
  """The fewest rows the packed kernel takes for w: $SPECJAX_PACKED_MIN_ROWS, else the view's calibrated count."""
  return env_min_rows() or w.min_rows


def _runs_packed(x_NxK: jax.Array, w) -> bool:
  if not (isinstance(w, PackedKernel) and w.tiles is not None and x_NxK.dtype == jnp.float32 and available()):
    return False
  return _min_rows(w) <= math.prod(x_NxK.shape[:-1]) <= MAX_ROWS


def _kernel_call(x_MxK: jax.Array, tiles: jax.Array, n_out: int) -> jax.Array:
  """The packed kernel's custom call: x [M, K] @ the tiles' columns, n_out of them."""
  return jax.ffi.ffi_call(build.PACKED_TARGET_NAME, jax.ShapeDtypeStruct((x_MxK.shape[0], n_out), jnp.float32))(
      x_MxK, tiles)


def packed_dense(x_NxK: jax.Array, w: PackedKernel) -> jax.Array:
  """x [..., K] @ W: the packed kernel for 1..64 float32 rows on a CPU with AVX-512, else XLA's dot on the
  original. Inference only (no gradient with respect to the tiles)."""
  return dense_group(x_NxK, [w])[0]


def dense_group(x_NxK: jax.Array, ws: list) -> list:
  """[x @ w for w in ws], kernels that read one input: one packed kernel call where the packed view fused them
  (ws[0].group), else a matmul each."""
  lead = ws[0]
  if len(ws) > 1 and not (isinstance(lead, PackedKernel) and lead.group):
    return [dense(x_NxK, w) for w in ws]
  if not _runs_packed(x_NxK, lead):   # the plain skinny kernel where it runs, else XLA's dot
    return [linear.dense(x_NxK, plain(w), transposed=getattr(w, "transposed", False)) for w in ws]
  widths = lead.group or (lead.n_out,)
  if [getattr(w, "member", None) for w in ws] != list(range(len(ws))):
    raise ValueError(f"kernels {[getattr(w, 'member', None) for w in ws]} of a packed group of {len(widths)} are not "
                     f"its first ones in order")
  rows, n_out = math.prod(x_NxK.shape[:-1]), sum(widths)
  x_MxK = x_NxK.reshape(rows, x_NxK.shape[-1])

  def off_cpu(x, _):   # the packed view is made on CPU only; XLA's dots, the columns of ws passed, zeros after
    y = jnp.concatenate([linear.xla_dot(x, w.kernel, w.transposed) for w in ws], axis=-1)
    return jnp.pad(y, ((0, 0), (0, n_out - y.shape[-1])))

  y_MxN = jax.lax.platform_dependent(x_MxK, lead.tiles, cpu=lambda x, t: _kernel_call(x, t, n_out), default=off_cpu)
  y = y_MxN.reshape(x_NxK.shape[:-1] + (n_out,))
  ends = list(itertools.accumulate(widths))
  return [y[..., end - width:end] for width, end in zip(widths[:len(ws)], ends)]


def dense(x_NxK: jax.Array, w, *, transposed: bool = False) -> jax.Array:
  """The model's one matmul with a weight: x [..., K] @ w [K, N] (or w [N, K] with transposed=True); a
  PackedKernel knows its own layout."""
  if isinstance(w, PackedKernel):
    return packed_dense(x_NxK, w)
  return linear.dense(x_NxK, w, transposed=transposed)


def _is_packable(path, value, tied: bool) -> bool:
  name = str(path[-1]) if path else ""
  if not (hasattr(value, "ndim") and value.ndim == 2 and value.dtype == jnp.float32):
    return False
  return name == "kernel" or (tied and name == "embed" and len(path) == 1)


_pack = jax.jit(pack)
_pack_rows = jax.jit(pack_rows)


_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def packed_params(model) -> nnx.State:
  """The Model's parameters with every float32 kernel (and a tied embedding) a PackedKernel; made once per Model
  and kept while it lives. Without the kernels (not a CPU with AVX-512, kernels off) the plain parameters."""
  if not (available() and jax.default_backend() == "cpu"):
    return model.params
  if model not in _CACHE:
    tied = bool(model.config.tie_embeddings)
    flat = dict(nnx.to_flat_state(model.params))
    leaves = []
    for path, var in flat.items():
      w = var[...]
      if _is_packable(path, w, tied):
        table = str(path[-1]) == "embed"
        group = _fused_group(path, flat, tied)
        if not group:
          var = var.replace(PackedKernel(kernel=w, tiles=_pack_rows(w) if table else _pack(w), transposed=table))
        elif group[0] == path:   # the group's first kernel: the tiles of all of them
          kernels = [flat[p][...] for p in group]
          var = var.replace(PackedKernel(kernel=w, tiles=_pack(jnp.concatenate(kernels, axis=1)),
                                         group=tuple(int(k.shape[1]) for k in kernels)))
        else:
          var = var.replace(PackedKernel(kernel=w, tiles=None, member=group.index(path)))
      leaves.append((path, var))
    tiles = [var[...].tiles for _, var in leaves if isinstance(var[...], PackedKernel) and var[...].tiles is not None]
    log.info("packed tiles on 2 MB pages: %d MB", host_memory.back_with_huge_pages(tiles) >> 20)
    _CACHE[model] = _with_min_rows(leaves)
  return _CACHE[model]


def _with_min_rows(leaves: list) -> nnx.State:
  """The view with its kernels' min_rows timed on this CPU (`calibrate`; skipped where $SPECJAX_PACKED_MIN_ROWS
  decides): a static field, so programs traced for one model's choice are not reused for another's."""
  weights = [var[...] for _, var in leaves if isinstance(var[...], PackedKernel)]
  if env_min_rows() is None and weights:
    key = calibration_cache.cache_key([w.kernel.shape + (w.transposed,) for w in weights], LADDER)
    fewest = calibration_cache.load(key)
    if fewest is None:
      seconds = calibrate(weights)
      fewest = threshold(seconds)
      calibration_cache.store(key, fewest, seconds)
      log.info("packed kernel from %d rows: ms per pass, plain / packed, by rows: %s", fewest,
               {r: f"{1e3 * a:.2f} / {1e3 * b:.2f}" for r, (a, b) in seconds.items()})
    leaves = [(path, var.replace(var[...].replace(min_rows=fewest)) if isinstance(var[...], PackedKernel) else var)
              for path, var in leaves]
  return nnx.from_flat_state(leaves)


def view_min_rows(view) -> int | None:
  """The fewest rows the packed kernel takes on this view (None where nothing is packed)."""
  weights = [var[...] for _, var in nnx.to_flat_state(view) if isinstance(var[...], PackedKernel)]
  return _min_rows(weights[0]) if weights else None


def _fused_group(path: tuple, flat: dict, tied: bool) -> list:
  """The paths of the FUSED group of this `kernel` (its siblings all packable, of one input size), else []."""
  if len(path) < 2 or str(path[-1]) != "kernel":
    return []
  for names in FUSED:
    if str(path[-2]) in names:
      paths = [path[:-2] + (name, "kernel") for name in names]
      if all(p in flat and _is_packable(p, flat[p][...], tied) for p in paths) and \
          len({flat[p][...].shape[0] for p in paths}) == 1:
        return paths
  return []


def view_bytes(model) -> int:
  """The bytes the Model's packed view adds (its tiles), 0 while none was made."""
  view = _CACHE.get(model)
  if view is None:
    return 0
  weights = (var[...] for _, var in nnx.to_flat_state(view))
  return sum(w.tiles.nbytes for w in weights if isinstance(w, PackedKernel) and w.tiles is not None)
