"""An int8 / q4 self-draft in the AOT path: the abstract quantized parameters hold exactly the bytes a quantized
model holds, are placed by the fp32 weights' rules, and the compiled draft step counts those bytes."""

import importlib.util

import jax
import numpy as np
import pytest

from aot.tiny_config import with_changes as _tiny_config
from specjax.aot.run import run_aot
from specjax.aot.settings import settings_from_config
from specjax.config import ModelConfig
from specjax.model import init_model
from specjax.quantize import quantize_model
from specjax.sharding import abstract_sharded_params, make_mesh

needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="needs libtpu: pip install -e '.[tpu]'")


def _nbytes(tree) -> int:
  return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


@pytest.mark.parametrize("weights", ["int8", "q4"])
def test_abstract_quantized_params_are_a_quantized_models(weights):
  config = ModelConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128, max_seq_len=64,
                       tie_embeddings=False)
  model = quantize_model(init_model(config, seed=0), weights)
  graphdef, abstract = abstract_sharded_params(make_mesh(1, 1, jax.devices()[:1]), config, weights)
  assert graphdef == model.graphdef
  real = {k: (v.shape, v.dtype) for k, v in model.flat_params().items()}
  assert jax.tree.structure(abstract) == jax.tree.structure(model.params)
  assert [(x.shape, x.dtype) for x in jax.tree.leaves(abstract)] == [(x.shape, x.dtype)
                                                                      for x in jax.tree.leaves(model.params)]
  assert _nbytes(abstract) == _nbytes(model.params) and len(real) == len(jax.tree.leaves(abstract))


def test_quantized_weights_split_like_the_float_ones():
  config = ModelConfig(vocab_size=256, d_model=64, n_layers=1, n_heads=4, n_kv_heads=4, ffn_dim=128, max_seq_len=64)
  mesh = make_mesh(1, 4, jax.devices()[:4])
  _, params = abstract_sharded_params(mesh, config, "int8")
  layer = params["layers"][0]
  # W [N, K] is the kernel [K, N] transposed: q/k/v and gate/up split their output rows, o and down their inputs.
  assert layer["attn"]["q"]["q"].sharding.spec == jax.sharding.PartitionSpec("model", None)
  assert layer["attn"]["q"]["scale"].sharding.spec == jax.sharding.PartitionSpec("model", None)
  assert layer["mlp"]["down"]["q"].sharding.spec == jax.sharding.PartitionSpec(None, "model")
  assert params["embed"]["q"].sharding.spec == jax.sharding.PartitionSpec("model", None)


def test_settings_self_draft_and_draft_weights():
  settings = settings_from_config(_tiny_config(self_draft=True, draft_weights="int8"))
  assert settings.draft == settings.target and settings.draft_weights == "int8"
  assert settings_from_config(_tiny_config()).draft_weights == "float"
  with pytest.raises(ValueError, match=r"config.draft_weights: weights must be one of \['float', 'int8', 'q4'\], "
                                       r"got 'int4'"):
    settings_from_config(_tiny_config(draft_weights="int4"))
  with pytest.raises(ValueError, match="config.self_draft must be True or False, got 'yes'"):
    settings_from_config(_tiny_config(self_draft="yes"))


@needs_libtpu
def test_int8_self_draft_step_reads_half_the_targets_bytes():
  config = _tiny_config(self_draft=True, draft_weights="int8", acceptance_rate=0.958)  # SmolLM2's int8 median
  result = run_aot(settings_from_config(config), log=lambda _: None)
  draft, ar = result["programs"]["draft_step"], result["programs"]["ar_step"]
  assert result["draft_weights"] == "int8" and result["draft"] == result["target"]
  assert draft["weight_bytes"] == result["weight_bytes_per_device"]["draft"]
  # int8 values plus one float16 scale per output row, against bfloat16: a little over half the bytes.
  assert 0.5 < draft["weight_bytes"] / ar["weight_bytes"] < 0.55
  assert draft["memory_ms"] < 0.6 * ar["memory_ms"]
  # E(0.958, 4) = 4.60 tokens a round for 4 draft steps at ~0.53 and one verify at ~1.02 target steps.
  assert 1.3 < result["predicted_speedup"]["4"] < 1.6
