"""TPU topologies from a name such as "v4:2x2x4", compiled for on a host without TPUs (libtpu's compile-only
devices), and the ("data", "model") mesh over them."""

import dataclasses
import math
import os
import re

import numpy as np
from jax.sharding import Mesh

from specjax.aot.chips import CHIPS, ChipSpec, chip_spec
from specjax.distributed import on_tpu_vm
from specjax.sharding import AXES

_NAME = re.compile(r"^(v\d+[a-z]*):(\d+(?:x\d+){1,2})$")
# Chips per host of a TPU VM (libtpu's default bounds); smaller slices are one host.
_HOST_BOUNDS = (2, 2, 1)
# Generations whose two TensorCores per chip JAX runs as one device.
_MEGACORE = ("v4", "v5p")


@dataclasses.dataclass(frozen=True)
class Topology:
  name: str
  generation: str
  dims: tuple
  devices: tuple
  chip: ChipSpec

  @property
  def n_devices(self) -> int:
    return len(self.devices)

  @property
  def n_hosts(self) -> int:
    return len({d.process_index for d in self.devices})


def parse_topology(name: str) -> tuple[str, tuple]:
  """("v4", (2, 2, 4)) from "v4:2x2x4"; a clear error for anything else."""
  match = _NAME.match(str(name).strip().lower())
  if not match:
    raise ValueError(f"unknown TPU topology {name!r}: expected GENERATION:AxB[xC] such as v4:2x2x4 or v5e:2x4 "
                     f"(generations with peak figures: {sorted(CHIPS)})")
  generation, dims = match.group(1), tuple(int(x) for x in match.group(2).split("x"))
  if generation not in CHIPS:
    raise ValueError(f"unknown TPU topology {name!r}: no peak figures for TPU {generation!r} "
                     f"(known generations: {sorted(CHIPS)})")
  if min(dims) < 1:
    raise ValueError(f"unknown TPU topology {name!r}: every dimension must be >= 1")
  return generation, dims


def _quiet_libtpu_on_cpu_host() -> None:
  """On a host without TPU devices, tell libtpu not to look for TPU VM metadata (which it would log as errors)
  and not to take its one-process-per-host lock (any JAX process that probed for TPUs may hold it)."""
  if on_tpu_vm():
    return
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
  os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
  os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v4-8")


def has_libtpu() -> bool:
  import importlib.util
  return importlib.util.find_spec("libtpu") is not None


def get_topology(name: str) -> Topology:
  """The compile-only devices of a TPU slice, one per chip; needs libtpu, not TPU hardware."""
  generation, dims = parse_topology(name)
  if not has_libtpu():
    raise RuntimeError("compiling for a TPU topology needs libtpu: pip install -e '.[tpu]'")
  _quiet_libtpu_on_cpu_host()
  from jax.experimental import topologies
  dims3 = dims + (1,) * (3 - len(dims))
  kwargs = dict(chips_per_host_bounds=tuple(min(d, b) for d, b in zip(dims3, _HOST_BOUNDS)))
  if generation in _MEGACORE:
    kwargs["chip_config_name"] = "megacore"
  try:
    description = topologies.get_topology_desc(f"{generation}:{'x'.join(map(str, dims))}", "tpu", **kwargs)
  except Exception as err:  # libtpu raises JaxRuntimeError with its own reason
    raise ValueError(f"unknown TPU topology {name!r}: libtpu does not know it ({str(err).splitlines()[0]})") from None
  devices = tuple(description.devices)
  if len(devices) != math.prod(dims):
    raise ValueError(f"topology {name!r} gave {len(devices)} devices, expected one per chip ({math.prod(dims)})")
  return Topology(name=name, generation=generation, dims=dims, devices=devices, chip=chip_spec(generation))


def topology_mesh(topology: Topology, data: int, model: int) -> Mesh:
  """A ("data", "model") mesh over the topology's chips, laid out along its physical torus by JAX."""
  from jax.experimental import mesh_utils
  if data * model != topology.n_devices:
    raise ValueError(f"mesh {data}x{model} = {data * model} devices does not match topology {topology.name!r} "
                     f"with {topology.n_devices} chips")
  devices = mesh_utils.create_device_mesh((data, model), list(topology.devices))
  return Mesh(np.asarray(devices), AXES)

