"""Multi-host runs: `jax.distributed.initialize` from flags (auto-detected on TPU VMs), and reading results back
when arrays span processes. Every process runs the same program on the same inputs; JAX makes one global mesh.

Call `initialize` before anything touches devices (jax.devices(), a first array).
"""

import glob

import jax
import numpy as np
from absl import flags

MODES = ("auto", "on", "off")


def define_flags() -> None:
  """The --distributed, --coordinator_address, --num_processes, --process_id ... flags of a script."""
  flags.DEFINE_enum("distributed", "auto", MODES, "auto: initialize jax.distributed when a coordinator is given or "
                    "on a TPU VM (where JAX finds the slice's hosts itself); on: always; off: never")
  flags.DEFINE_string("coordinator_address", "", "host:port of process 0's coordinator (not needed on TPU VMs)")
  flags.DEFINE_string("coordinator_bind_address", "", "address the coordinator listens on (default: all interfaces)")
  flags.DEFINE_integer("num_processes", 0, "number of processes (0: auto-detect on TPU VMs)")
  flags.DEFINE_integer("process_id", -1, "this process's index in [0, num_processes) (-1: auto-detect on TPU VMs)")
  flags.DEFINE_integer("distributed_timeout_s", 300, "seconds to wait for every process to join")
  flags.DEFINE_string("cpu_collectives", "gloo", "collectives implementation for CPU devices across processes")


def on_tpu_vm() -> bool:
  """TPU chips are attached to this host (their device files exist)."""
  return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def initialize(mode: str = "auto", coordinator_address: str = "", num_processes: int = 0, process_id: int = -1,
               coordinator_bind_address: str = "", timeout_s: int = 300, cpu_collectives: str = "gloo") -> bool:
  """Joins this process to the others; returns whether jax.distributed is in use. Idempotent."""
  if mode not in MODES:
    raise ValueError(f"distributed mode must be one of {MODES}, got {mode!r}")
  explicit = bool(coordinator_address) or num_processes > 0 or process_id >= 0
  if mode == "off" or (mode == "auto" and not explicit and not on_tpu_vm()):
    return False
  if jax.distributed.is_initialized():
    return True
  if not on_tpu_vm():
    missing = [name for name, given in (("coordinator_address", coordinator_address),
                                        ("num_processes", num_processes > 0), ("process_id", process_id >= 0))
               if not given]
    if missing:
      raise ValueError(f"without TPUs to auto-detect the cluster from, a multi-process run needs {missing} "
                       "(e.g. --coordinator_address=10.0.0.2:8476 --num_processes=2 --process_id=0)")
    if not 0 <= process_id < num_processes:
      raise ValueError(f"process_id {process_id} is outside [0, num_processes={num_processes})")
    jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
  kwargs = dict(coordinator_address=coordinator_address or None, num_processes=num_processes or None,
                process_id=process_id if process_id >= 0 else None, initialization_timeout=timeout_s,
                coordinator_bind_address=coordinator_bind_address or None)
  jax.distributed.initialize(**kwargs)
  return True


def initialize_from_flags() -> bool:
  """`initialize` with the values of the flags `define_flags` declared."""
  f = flags.FLAGS
  return initialize(f.distributed, f.coordinator_address, f.num_processes, f.process_id, f.coordinator_bind_address,
                    f.distributed_timeout_s, f.cpu_collectives)


def _host_value(x):
  if not isinstance(x, jax.Array) or x.is_fully_addressable:
    return np.asarray(x)
  if x.is_fully_replicated:
    return np.asarray(x.addressable_data(0))
  from jax.experimental import multihost_utils
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def host_values(tree):
  """`jax.device_get` that also works when an array spans devices of other processes (gathered over all of them;
  every process must call it)."""
  return jax.tree.map(_host_value, tree)
