"""The static half of a generation: one frozen, hashable spec per compiled program (the jit cache key).

`DecodeSpec` is the one static argument of the decode program; its `prefill` view (`PrefillSpec`) is the one of the
prefill program, which depends on neither the drafter nor K, so every method at one shape shares one prefill
compilation. Kernel routing (the hand-written CPU kernels, on or off) is a field, so two programs that differ in
kernels never share a cache entry.
"""

import dataclasses
import functools
from typing import Any

from specjax.policy import SpeculationPolicy
from specjax.sampling import SamplingParams


CACHED = ("_hash", "target", "prefill")   # kept per object, never copied or pickled (hashes differ by process)


def spec_dataclass(cls):
  """A frozen dataclass whose hash is computed at the first call and kept: a spec is hashed on every program call
  (jit's static arguments, the engine's per-spec tables), and hashing the NNX graphs it holds takes milliseconds."""
  cls = dataclasses.dataclass(frozen=True)(cls)

  def __hash__(self):
    if "_hash" not in self.__dict__:
      self.__dict__["_hash"] = hash((cls,) + tuple(getattr(self, f.name) for f in dataclasses.fields(self)))
    return self.__dict__["_hash"]

  def __getstate__(self):
    return {name: value for name, value in self.__dict__.items() if name not in CACHED}

  cls.__hash__, cls.__getstate__ = __hash__, __getstate__
  return cls


@spec_dataclass
class TargetSpec:
  """What the target's scoring call alone depends on: its graph, the mesh and kernel routing."""

  graphdef: Any                      # the target's NNX graph
  mesh: Any = None                   # a ("data", "model") jax Mesh, or None for one device
  kernels: bool = True               # the CPU kernels may be used (they are off on meshes: no partitioning rule)
  bf16_gemm: bool = False            # prefill-shaped float32 products take bfloat16 operands (`kernels.bf16_gemm`)

  def __post_init__(self):
    if self.mesh is not None and self.kernels:
      raise ValueError("the CPU kernels have no partitioning rule: a spec with a mesh needs kernels=False")


@spec_dataclass
class PrefillSpec:
  """What the prefill program's trace depends on."""

  graphdef: Any                      # the target's NNX graph
  sampling: SamplingParams
  eos_ids: tuple[int, ...]
  prompt_bucket: int                 # prompt positions the prefill runs (a power of two >= the longest prompt)
  mesh: Any = None                   # a ("data", "model") jax Mesh, or None for one device
  kernels: bool = True               # the CPU kernels may be used (they are off on meshes: no partitioning rule)
  feature_layers: tuple[int, ...] | None = None  # target layers whose features the drafter reads; None: no features

  def __post_init__(self):
    if not isinstance(self.sampling, SamplingParams):
      raise TypeError(f"sampling must be a SamplingParams, got {type(self.sampling).__name__}")
    object.__setattr__(self, "eos_ids", tuple(int(t) for t in self.eos_ids))
    if self.prompt_bucket < 1:
      raise ValueError(f"prompt_bucket must be >= 1, got {self.prompt_bucket}")
    self.target  # validates mesh and kernels

  @functools.cached_property
  def target(self) -> TargetSpec:
    return TargetSpec(graphdef=self.graphdef, mesh=self.mesh, kernels=self.kernels)


@spec_dataclass
class DecodeSpec:
  """What the decode program's trace depends on: the target graph, the drafter (a static, hashable object), the
  sampling setting, K (0 = autoregressive, an int, or a SpeculationPolicy that picks K per round), EOS ids, the
  prompt bucket, the mesh, kernel routing and the tree of drafts (None: a chain of K)."""

  graphdef: Any
  drafter: Any                       # a specjax.drafters.Drafter, or None for autoregressive decoding
  sampling: SamplingParams
  k: "int | SpeculationPolicy"
  eos_ids: tuple[int, ...]
  prompt_bucket: int
  mesh: Any = None
  kernels: bool = True
  tree: Any = None                   # a StaticTree or DynamicTree: rounds verify its N nodes (k == N); None: a chain

  def __post_init__(self):
    object.__setattr__(self, "eos_ids", tuple(int(t) for t in self.eos_ids))
    adaptive = isinstance(self.k, SpeculationPolicy)
    if self.tree is not None:
      from specjax.trees import TREES
      if not isinstance(self.tree, TREES):
        raise TypeError(f"DecodeSpec.tree must be a StaticTree or DynamicTree, got {type(self.tree).__name__}")
      if adaptive or self.drafter is None or self.k != self.tree.n_nodes:
        raise ValueError(f"a tree needs a drafter and k = its {self.tree.n_nodes} nodes (no adaptive policy); "
                         f"got drafter {type(self.drafter).__name__}, k={self.k!r}")
    if not adaptive and (isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 0):
      raise ValueError(f"DecodeSpec.k must be an int >= 0 or a SpeculationPolicy, got {self.k!r}")
    if self.drafter is None and (adaptive or self.k):
      raise ValueError(f"k={self.k!r} needs a drafter; without one, decoding is autoregressive (k=0)")
    if self.drafter is not None and not adaptive and self.k == 0:
      raise ValueError("a drafter needs k >= 1 or a SpeculationPolicy; k=0 is autoregressive decoding")
    self.prefill  # validates the shared fields

  @property
  def adaptive(self) -> bool:
    return isinstance(self.k, SpeculationPolicy)

  @property
  def max_k(self) -> int:
    """The most drafts a round proposes (0 without a drafter)."""
    return self.k.max_k if self.adaptive else self.k

  @property
  def feature_layers(self):
    return None if self.drafter is None else self.drafter.feature_layers

  @functools.cached_property
  def target(self) -> TargetSpec:
    return TargetSpec(graphdef=self.graphdef, mesh=self.mesh, kernels=self.kernels)

  @functools.cached_property
  def prefill(self) -> PrefillSpec:
    return PrefillSpec(graphdef=self.graphdef, sampling=self.sampling, eos_ids=self.eos_ids,
                       prompt_bucket=self.prompt_bucket, mesh=self.mesh, kernels=self.kernels,
                       feature_layers=self.feature_layers)

  def replace(self, **changes) -> "DecodeSpec":
    return dataclasses.replace(self, **changes)
