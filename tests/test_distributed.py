"""Multi-process generation: two processes on localhost (CPU, gloo collectives) generate exactly the tokens a
single process does; the flag helper fails clearly when a cluster cannot be formed."""

import os
import re
import socket
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import distributed
from specjax.cli import drafter_from_config, model_from_source

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 240
ARGS = ["scripts/generate.py", "--config=configs/tiny.py", "--config.compare_autoregressive=False",
        "--config.temperature=1.0", "--config.max_new_tokens=16", "--distributed_timeout_s=120"]


def _free_loopback_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env():
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1")
  env.pop("TPU_WORKER_HOSTNAMES", None)
  return env


def _rows(stdout: str) -> list[str]:
  return re.findall(r"^-- \[\d+\] .*$", stdout, flags=re.M)


def _single_process_rows() -> list[str]:
  """What scripts/generate.py prints for ARGS in one process (computed here, on this process's first device)."""
  from configs import tiny
  config = tiny.get_config()
  target = model_from_source(config.model)
  drafter = drafter_from_config(config.drafter, target, config.draft_model)
  prompts = [[int(t) for t in p.split()] for p in config.prompts]
  result = specjax.generate(target, prompts, max_new_tokens=16, seed=config.seed, drafter=drafter, k=config.k,
                            sampling=specjax.SamplingParams(1.0, config.top_k, config.top_p))
  return [f"-- [{row}] {' '.join(map(str, tokens))!r}" for row, tokens in enumerate(result.tokens)]


def _run_all(commands):
  procs = [subprocess.Popen([sys.executable, *c], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True) for c in commands]
  try:
    outs = [p.communicate(timeout=TIMEOUT_S) for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.communicate()
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  return [out for out, _ in outs]


def test_two_processes_generate_the_single_process_tokens():
  address = f"127.0.0.1:{_free_loopback_port()}"
  cluster = [ARGS + ["--config.mesh=1x2", f"--coordinator_address={address}", f"--coordinator_bind_address={address}",
                     "--num_processes=2", f"--process_id={i}"] for i in range(2)]
  first, second = _run_all(cluster)
  single = _single_process_rows()
  assert len(single) == 2  # two prompts in configs/tiny.py
  assert _rows(first) == single
  assert _rows(second) == single


def test_flags_off_or_absent_leave_jax_single_process():
  assert distributed.initialize("off", "127.0.0.1:1", 2, 0) is False
  if not distributed.on_tpu_vm():
    assert distributed.initialize("auto") is False


@pytest.mark.skipif(distributed.on_tpu_vm(), reason="TPU VMs auto-detect the cluster")
def test_missing_cluster_flags_are_named():
  with pytest.raises(ValueError, match=r"\['num_processes', 'process_id'\]"):
    distributed.initialize("auto", coordinator_address="127.0.0.1:1")
  with pytest.raises(ValueError, match="process_id 2 is outside"):
    distributed.initialize("on", "127.0.0.1:1", 2, 2)
  with pytest.raises(ValueError, match="mode"):
    distributed.initialize("sometimes")


def test_host_values_of_local_arrays():
  tree = {"a": jnp.arange(4), "b": (np.ones(2), 3)}
  values = distributed.host_values(tree)
  np.testing.assert_array_equal(values["a"], np.arange(4))
  assert isinstance(values["a"], np.ndarray) and values["b"][1] == 3
