"""Per-device figures of one compiled program and its roofline time on a chip.

Memory and FLOPs come from XLA (`memory_analysis`, `cost_analysis`). XLA's "bytes accessed" counts each in-place
KV-cache update as a write of the whole cache buffer, and the attention loop (data-dependent trip count) once;
so the memory time uses what a decode step must read instead: the device's weight shards, the KV cache up to
the context length, and its other inputs and outputs. Both byte counts are reported. XLA's FLOPs of the
1-position programs come out about 2.3x the matmul count (its matrix-vector lowering), so `model_flops`
(2 x matmul parameters + attention over the context, per position) is reported beside them.
"""

import dataclasses
import math

import jax
import numpy as np

from specjax.aot.chips import ChipSpec
from specjax.aot.collectives import collectives
from specjax.aot.programs import CACHE_ARG, Program


@dataclasses.dataclass(frozen=True)
class ProgramFigures:
  """Per-device bytes, FLOPs and the roofline of one program (times in ms)."""

  name: str
  role: str
  positions: int
  k: int
  argument_bytes: int
  temp_bytes: int
  output_bytes: int
  alias_bytes: int
  weight_bytes: int
  cache_bytes: int
  kv_read_bytes: int
  flops: float
  model_flops: float
  xla_bytes_accessed: float
  roofline_bytes: float
  collectives: dict
  compute_ms: float
  memory_ms: float
  comm_ms: float
  hbm_bytes: int
  compile_s: float = 0.0
  interpolated: bool = False

  @property
  def peak_bytes(self) -> int:
    """Bytes live on a device while the program runs (donated outputs share their input's buffer)."""
    return self.argument_bytes + self.temp_bytes + self.output_bytes - self.alias_bytes

  @property
  def fits_hbm(self) -> bool:
    return self.peak_bytes <= self.hbm_bytes

  @property
  def roofline_ms(self) -> float:
    """max(compute, memory) + communication: at batch 1 the collectives sit between layers, not overlapped."""
    return max(self.compute_ms, self.memory_ms) + self.comm_ms

  @property
  def n_collectives(self) -> int:
    return sum(c["count"] for c in self.collectives.values())

  def to_dict(self) -> dict:
    out = dataclasses.asdict(self)
    out.update(peak_bytes=self.peak_bytes, fits_hbm=self.fits_hbm, roofline_ms=self.roofline_ms,
               n_collectives=self.n_collectives)
    return out


def shard_bytes(shape, dtype, sharding) -> int:
  """Bytes of one device's shard of an array of `shape` placed with `sharding`."""
  return math.prod(sharding.shard_shape(tuple(shape))) * np.dtype(dtype).itemsize


def _device_bytes(abstract_tree, sharding_tree) -> int:
  leaves = jax.tree.leaves(abstract_tree)
  shardings = jax.tree.leaves(sharding_tree, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))
  if len(leaves) != len(shardings):
    raise ValueError(f"{len(leaves)} arrays but {len(shardings)} shardings")
  return sum(shard_bytes(x.shape, x.dtype, s) for x, s in zip(leaves, shardings))


def model_flops(program: Program, context_len: int) -> float:
  """Per-device FLOPs of the model's arithmetic: 2 per matmul parameter and position, plus attention (QK^T and
  AV over the context); the embedding lookup is not a matmul unless it doubles as the (tied) head."""
  c = program.config
  mesh = jax.tree.leaves(program.args[0])[0].sharding.mesh
  rows = program.args[1].shape[0]
  rows_per_device = rows / mesh.shape["data"] if rows % mesh.shape["data"] == 0 else rows
  matmul_params = c.param_count() - (0 if c.tie_embeddings else c.vocab_size * c.d_model)
  attention = 4 * c.n_layers * context_len * c.n_heads * c.head_dim_
  return rows_per_device * program.positions * (2 * matmul_params + attention) / mesh.shape["model"]


def _cost(compiled) -> dict:
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):  # older jax: one dict per computation
    cost = cost[0] if cost else {}
  return cost or {}


def analyse(program: Program, compiled, chip: ChipSpec, context_len: int, compile_s: float = 0.0) -> ProgramFigures:
  """Figures of `compiled` (the program lowered and compiled for the topology's devices)."""
  memory = compiled.memory_analysis()
  cost = _cost(compiled)
  in_shardings = compiled.input_shardings[0]
  weight_bytes = _device_bytes(program.args[0], in_shardings[0])
  cache = program.args[CACHE_ARG]
  cache_bytes = _device_bytes(cache, in_shardings[CACHE_ARG])
  kv_bytes = _device_bytes((cache.k, cache.v), (in_shardings[CACHE_ARG].k, in_shardings[CACHE_ARG].v))
  kv_read = int(kv_bytes * min(context_len, cache.k.shape[2]) / cache.k.shape[2])
  other_inputs = memory.argument_size_in_bytes - weight_bytes - cache_bytes
  new_outputs = memory.output_size_in_bytes - memory.alias_size_in_bytes
  roofline_bytes = weight_bytes + kv_read + max(other_inputs, 0) + new_outputs
  comm = collectives(compiled.as_text(), default_group=1)
  moved = sum(c["moved_bytes"] for c in comm.values())
  flops = float(cost.get("flops", 0.0))
  return ProgramFigures(
      name=program.name, role=program.role, positions=program.positions, k=program.k,
      argument_bytes=int(memory.argument_size_in_bytes), temp_bytes=int(memory.temp_size_in_bytes),
      output_bytes=int(memory.output_size_in_bytes), alias_bytes=int(memory.alias_size_in_bytes),
      weight_bytes=weight_bytes, cache_bytes=cache_bytes, kv_read_bytes=kv_read, flops=flops,
      model_flops=model_flops(program, context_len),
      xla_bytes_accessed=float(cost.get("bytes accessed", 0.0)), roofline_bytes=float(roofline_bytes),
      collectives=comm, compute_ms=1e3 * flops / chip.peak_flops, memory_ms=1e3 * roofline_bytes / chip.hbm_bandwidth,
      comm_ms=1e3 * moved / chip.collective_bandwidth, hbm_bytes=chip.hbm_bytes, compile_s=compile_s)


def interpolate(one: ProgramFigures, many: ProgramFigures, k: int) -> ProgramFigures:
  """Figures of a verify over K+1 positions, affine in positions between a compiled 1-position step and a
  compiled verify (FLOPs, bytes and collective payloads all grow linearly with the positions scored)."""
  span = many.positions - one.positions
  if span <= 0:
    raise ValueError("interpolation needs a program with more positions than the single step")
  t = (k + 1 - one.positions) / span

  def mix(a, b):
    return a + t * (b - a)

  comm = {kind: {"count": entry["count"],  # one collective per layer boundary whatever the positions
                 **{key: mix(one.collectives.get(kind, {}).get(key, 0), entry[key])
                    for key in ("result_bytes", "moved_bytes")}}
          for kind, entry in many.collectives.items()}
  fields = {f.name: f.type for f in dataclasses.fields(ProgramFigures)}
  numeric = {name: mix(getattr(one, name), getattr(many, name)) for name, kind in fields.items()
             if kind in (float, "float") and name != "compile_s"}
  sizes = {name: int(round(mix(getattr(one, name), getattr(many, name)))) for name, kind in fields.items()
           if kind in (int, "int") and name not in ("positions", "k", "hbm_bytes")}
  return dataclasses.replace(many, name=f"verify_k{k}", positions=k + 1, k=k, collectives=comm, interpolated=True,
                             compile_s=0.0, **numeric, **sizes)


def widen(step: ProgramFigures, positions: int) -> ProgramFigures:
  """A compiled 1-position step's figures over `positions` positions (a draft call over one tree level): FLOPs,
  collective payloads and new outputs grow with the positions; weights and the KV cache are read once."""
  if step.positions != 1 or positions < 1:
    raise ValueError(f"widen takes a 1-position step and positions >= 1, got {step.positions} and {positions}")
  extra = (positions - 1) * (step.output_bytes - step.alias_bytes)
  comm = {kind: dict(entry, result_bytes=entry["result_bytes"] * positions,
                     moved_bytes=entry["moved_bytes"] * positions) for kind, entry in step.collectives.items()}
  roofline_bytes = step.roofline_bytes + extra
  return dataclasses.replace(
      step, name=f"{step.name}_x{positions}", positions=positions, flops=step.flops * positions,
      model_flops=step.model_flops * positions, roofline_bytes=roofline_bytes, collectives=comm,
      compute_ms=step.compute_ms * positions, memory_ms=step.memory_ms * roofline_bytes / step.roofline_bytes,
      comm_ms=step.comm_ms * positions, interpolated=True, compile_s=0.0)
