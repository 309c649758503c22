"""Sharded generation equals unsharded (chains and token trees), and the verify call really splits the target over
"model"."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

import specjax
from specjax import drafters
from specjax.cache import init_cache
from specjax.sharding import make_mesh, sharded_verify

CONFIG = specjax.ModelConfig(vocab_size=256, d_model=128, n_layers=2, n_heads=16, n_kv_heads=8, ffn_dim=256,
                             max_seq_len=256)
PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8], [3, 4], [7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [5, 5, 5, 5]]
GREEDY = specjax.SamplingParams(temperature=0.0)

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs XLA_FLAGS=--xla_force_host_platform_device_count=8")


@pytest.fixture(scope="module")
def models():
  return specjax.init_model(CONFIG, seed=1), specjax.init_model(CONFIG.replace(n_layers=1, d_model=64, n_heads=8,
                                                                                n_kv_heads=4, ffn_dim=128), seed=2)


@pytest.fixture(scope="module")
def unsharded(models):
  target, draft = models
  ar = specjax.generate(target, PROMPTS, max_new_tokens=20, sampling=GREEDY).tokens
  spec = specjax.generate(target, PROMPTS, max_new_tokens=20, sampling=GREEDY, drafter=drafters.DraftModel(draft),
                          k=3).tokens
  assert ar == spec
  return ar


@pytest.mark.parametrize("shape", [(1, 8), (2, 4), (8, 1)])
def test_sharded_greedy_equals_unsharded(models, unsharded, shape):
  target, draft = models
  mesh = make_mesh(*shape)
  assert specjax.generate(target, PROMPTS, max_new_tokens=20, sampling=GREEDY, mesh=mesh).tokens == unsharded
  for drafter in (drafters.DraftModel(draft), drafters.PromptLookup()):
    out = specjax.generate(target, PROMPTS, max_new_tokens=20, sampling=GREEDY, drafter=drafter, k=3, mesh=mesh)
    assert out.tokens == unsharded
  trees = (specjax.DynamicTree(8, 3, 3), specjax.StaticTree(((0,), (1,), (0, 0), (1, 0), (0, 0, 0)), "sample"))
  trees = trees if shape == (2, 4) else trees[::-1]  # each drafter meets both kinds of tree over the meshes
  for drafter, tree in zip((drafters.DraftModel(draft), drafters.PromptLookup()), trees):
    out = specjax.generate(target, PROMPTS, max_new_tokens=20, sampling=GREEDY, drafter=drafter, tree=tree,
                           mesh=mesh)
    assert out.tokens == unsharded, (type(drafter).__name__, tree)


def test_verify_call_splits_target_weights_over_model(models):
  target, _ = models
  mesh = make_mesh(2, 4)
  verify = sharded_verify(mesh, target, batch=4)
  tokens = jnp.zeros((4, 5), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(5, dtype=jnp.int32), (4, 5))
  compiled = verify.lower(target.params, tokens, positions, init_cache(CONFIG, 4, 128)).compile()
  param_shardings = compiled.input_shardings[0][0]
  local = {}
  for path, sharding in jax.tree_util.tree_flatten_with_path(param_shardings)[0]:
    local[jax.tree_util.keystr(path)] = sharding
  flat = dict(jax.tree_util.tree_flatten_with_path(target.params)[0])
  by_name = {jax.tree_util.keystr(p): v for p, v in flat.items()}
  q_name = next(n for n in local if "'q'" in n and "kernel" in n)
  down_name = next(n for n in local if "'down'" in n)
  embed_name = next(n for n in local if "'embed'" in n)
  assert local[q_name].shard_shape(by_name[q_name].shape) == (128, 128 // 4)
  assert local[down_name].shard_shape(by_name[down_name].shape) == (256 // 4, 128)
  assert local[embed_name].shard_shape(by_name[embed_name].shape) == (256 // 4, 128)
  # Row-parallel o / down projections need a reduction across the model axis.
  assert "all-reduce" in compiled.as_text() or "reduce-scatter" in compiled.as_text()
  logits, _ = verify(target.params, tokens, positions, init_cache(CONFIG, 4, 128))
  assert logits.shape == (4, 5, 256)
  assert logits.sharding.shard_shape(logits.shape)[0] == 2  # batch split over "data"


def test_mesh_without_named_axes_is_rejected(models):
  target, _ = models
  bad = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))
  with pytest.raises(ValueError, match="data"):
    specjax.generate(target, PROMPTS, max_new_tokens=4, sampling=GREEDY, mesh=bad)


def test_make_mesh_rejects_shapes_that_do_not_use_all_devices():
  with pytest.raises(ValueError, match="devices"):
    make_mesh(3, 2)
