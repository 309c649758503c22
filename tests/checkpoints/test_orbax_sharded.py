"""Sharded Orbax checkpoints: parameters placed on a mesh are saved shard by shard and restored straight into a
(possibly different) mesh layout, each device holding only its shard."""

import jax
import numpy as np
import pytest

import specjax
from specjax.checkpoints import save_model
from specjax.checkpoints.orbax_io import load_orbax
from specjax.sharding import make_mesh, named_param_sharding, param_shardings

CONFIG = specjax.ModelConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=8, n_kv_heads=4, ffn_dim=128,
                             max_seq_len=128, tie_embeddings=False)

pytestmark = pytest.mark.skipif(jax.device_count() < 8,
                                reason="needs XLA_FLAGS=--xla_force_host_platform_device_count=8")


@pytest.fixture(scope="module")
def model():
  return specjax.init_model(CONFIG, seed=5)


def _on_mesh(model, mesh):
  return model.with_params(jax.device_put(model.params, param_shardings(mesh, model.config, model.params)))


@pytest.mark.parametrize("save_shape,restore_shape", [((1, 8), (1, 8)), ((2, 4), (1, 8)), ((1, 8), (4, 2))])
def test_sharded_round_trip_lands_in_the_mesh_layout(model, tmp_path, save_shape, restore_shape):
  saved = _on_mesh(model, make_mesh(*save_shape))
  path = save_model(saved, tmp_path / "ckpt")
  mesh = make_mesh(*restore_shape)
  restored = load_orbax(path, mesh=mesh)
  model_size = restore_shape[1]
  for name, value in restored.flat_params().items():
    sharding = named_param_sharding(mesh, CONFIG, name, value.shape)
    np.testing.assert_array_equal(np.asarray(value), np.asarray(model.flat_params()[name]), err_msg=name)
    assert value.sharding.is_equivalent_to(sharding, value.ndim), name
    shard_shapes = {s.data.shape for s in value.addressable_shards}
    assert shard_shapes == {sharding.shard_shape(value.shape)}, name
    if name.endswith("mlp.up.kernel"):  # column-parallel: each device holds 1/model_size of it
      assert sharding.shard_shape(value.shape) == (CONFIG.d_model, CONFIG.ffn_dim // model_size)


def test_restored_sharded_model_generates_like_the_original(model, tmp_path):
  path = save_model(_on_mesh(model, make_mesh(2, 4)), tmp_path / "ckpt")
  mesh = make_mesh(1, 8)
  restored = load_orbax(path, mesh=mesh)
  greedy = specjax.SamplingParams(temperature=0.0)
  prompts = [[1, 2, 3, 4], [9, 8]]
  expected = specjax.generate(model, prompts, max_new_tokens=8, sampling=greedy).tokens
  assert specjax.generate(restored, prompts, max_new_tokens=8, sampling=greedy, mesh=mesh).tokens == expected


def test_restore_rejects_a_mesh_without_the_named_axes(model, tmp_path):
  path = save_model(model, tmp_path / "ckpt")
  bad = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))
  with pytest.raises(ValueError, match="data"):
    load_orbax(path, mesh=bad)
