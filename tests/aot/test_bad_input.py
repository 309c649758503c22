"""Clear errors, naming the number, for meshes that do not divide, unknown topologies and weights that do not fit."""

import importlib.util
import os

import pytest

from specjax.aot.settings import settings_from_config
from specjax.aot.run import run_aot
from specjax.aot.topology import get_topology, parse_topology
from specjax.config import ModelConfig
from specjax.sharding import check_divides

needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="needs libtpu: pip install -e '.[tpu]'")


def _load_tiny_config():
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_config.py")
  spec = importlib.util.spec_from_file_location("aot_tiny_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


tiny_config = _load_tiny_config()


def _settings(**changes):
  config = tiny_config.get_config()
  for key, value in changes.items():
    config[key] = value
  return settings_from_config(config)


def test_model_axis_that_does_not_divide_heads_or_vocab():
  config = ModelConfig(vocab_size=1000, d_model=96, n_layers=1, n_heads=6, n_kv_heads=6, ffn_dim=192, max_seq_len=64)
  with pytest.raises(ValueError, match=r"size 4 does not divide the target's n_heads=6 \(6 % 4 = 2\)"):
    check_divides(config, 4, "target")
  with pytest.raises(ValueError, match=r"vocab_size=1000 \(1000 % 16 = 8\)"):
    check_divides(config.replace(n_heads=16, n_kv_heads=16, d_model=128, ffn_dim=256), 16, "target")
  check_divides(config.replace(vocab_size=1024, n_heads=8, n_kv_heads=2, d_model=128, ffn_dim=256), 8)


@pytest.mark.parametrize("name", ["banana", "v4:2x2x", "v9:2x2", "v3:2x2"])
def test_malformed_topology_names(name):
  with pytest.raises(ValueError, match=f"unknown TPU topology {name!r}"):
    parse_topology(name)


@needs_libtpu
def test_topology_that_libtpu_does_not_know():
  with pytest.raises(ValueError, match=r"unknown TPU topology 'v4:3x3x3': libtpu does not know it"):
    get_topology("v4:3x3x3")


@needs_libtpu
def test_mesh_that_does_not_divide_the_heads_fails_before_compiling():
  target = dict(tiny_config.TARGET, n_heads=6, n_kv_heads=6, d_model=384)
  with pytest.raises(ValueError, match=r"n_heads=6 \(6 % 4 = 2\)"):
    run_aot(_settings(target=target, draft=dict(target, n_layers=1)), log=lambda *_: None)
  with pytest.raises(ValueError, match="mesh 2x4 = 8 devices does not match topology 'v4:2x2x1' with 4 chips"):
    run_aot(_settings(mesh="2x4"), log=lambda *_: None)


@needs_libtpu
def test_weights_that_do_not_fit_name_the_bytes():
  big = dict(vocab_size=256000, d_model=16384, n_layers=2, n_heads=128, n_kv_heads=8, ffn_dim=65536,
             max_seq_len=512, tie_embeddings=False, dtype="bfloat16")
  settings = _settings(target=big, draft=dict(big, n_layers=1), topology="v5e:1x1", mesh="1x1")
  target_gb = ModelConfig.from_dict(big).param_count() * 2 / 1e9  # 16.0B parameters in bf16: 31.94 GB
  with pytest.raises(ValueError, match=rf"weights do not fit: target {target_gb:.2f} GB \+ draft .* GB = .* GB per "
                                       r"device .* exceed the 16\.00 GB of HBM of one TPU v5e chip"):
    run_aot(settings, log=lambda *_: None)


def test_settings_reject_inconsistent_configs():
  with pytest.raises(ValueError, match="compile_ks"):
    _settings(compile_ks=(2,))
  with pytest.raises(ValueError, match="acceptance_rate"):
    _settings(acceptance_rate=1.5)
  with pytest.raises(ValueError, match="draft vocabulary 512"):
    _settings(draft=dict(tiny_config.DRAFT, vocab_size=512))
