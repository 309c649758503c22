"""docs/adding_a_model_family.md walked once as written: a throwaway family (the Llama decoder with a bias-free
LayerNorm in place of RMSNorm) is written, given its entry, registered at runtime, then built, generated from,
sharded over a mesh and drafted for by LayerSkip and FeatureHead."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

import specjax
from specjax.cache import init_cache
from specjax.drafters import FeatureHead, LayerSkip, truncated_model
from specjax.models import ModelFamily, get_family, known_families, llama, register_family, unregister_family
from specjax.models.rope import rope_tables
from specjax.sharding import make_mesh, param_shardings


# Step 1: the module. A variant of the Llama decoder needs only subclasses that set its norm.
class LayerNorm(nnx.Module):
  """(x - mean) / std * scale, no bias."""

  def __init__(self, dim: int, eps: float, dtype):
    self.scale = nnx.Param(jnp.ones((dim,), dtype))
    self.eps = eps

  def __call__(self, x):
    x32 = x.astype(jnp.float32)
    centered = x32 - jnp.mean(x32, axis=-1, keepdims=True)
    normed = centered * jax.lax.rsqrt(jnp.mean(centered * centered, axis=-1, keepdims=True) + self.eps)
    return (normed * self.scale[...].astype(jnp.float32).reshape((1,) * (x.ndim - 1) + (-1,))).astype(x.dtype)


class LayerNormBlock(llama.Block):
  norm_class = LayerNorm


class LayerNormLlama(llama.Llama):
  block_class, norm_class = LayerNormBlock, LayerNorm


# Step 2: the hooks (Llama's RoPE, cacheless layer and sharding rules: the parameter names are Llama's) and the entry.
FAMILY = ModelFamily(name="test_layernorm_llama", module=LayerNormLlama, block=LayerNormBlock, norm=LayerNorm,
                     rope_tables=rope_tables, chain_block=llama.chain_block, sharding=llama.SHARDING)

SHAPE = dict(vocab_size=128, d_model=64, n_layers=3, n_heads=8, n_kv_heads=2, ffn_dim=128, max_seq_len=128)
PROMPTS = [[1, 2, 3, 4, 5, 6], [7, 8], [9, 10, 11, 12, 13, 14, 15, 16, 17]]
GREEDY = specjax.SamplingParams(temperature=0.0)
NEW_TOKENS = 8


# Step 3: registered at runtime for this module, removed after.
@pytest.fixture(scope="module")
def config():
  register_family(FAMILY)
  yield specjax.ModelConfig(**SHAPE, family=FAMILY.name)
  unregister_family(FAMILY.name)


@pytest.fixture(scope="module")
def model(config):
  return specjax.init_model(config, seed=4)


@pytest.fixture(scope="module")
def greedy(model):
  return specjax.generate(model, PROMPTS, max_new_tokens=NEW_TOKENS, sampling=GREEDY).tokens


@functools.partial(jax.jit, static_argnums=(0, 1))
def _forward(config, graphdef, params, tokens_BxT):
  positions = jnp.broadcast_to(jnp.arange(tokens_BxT.shape[1], dtype=jnp.int32), tokens_BxT.shape)
  return nnx.merge(graphdef, params)(tokens_BxT, positions, init_cache(config, *tokens_BxT.shape))[0]


def _logits(model, tokens_BxT):
  return _forward(model.config, model.graphdef, model.params, tokens_BxT)


def reference_greedy(model, prompt, n):
  """Greedy tokens by a full forward over the whole sequence each step (no cache reuse, no engine)."""
  tokens = list(prompt)
  width = len(prompt) + n
  for _ in range(n):
    padded = jnp.asarray([tokens + [0] * (width - len(tokens))], jnp.int32)
    tokens.append(int(jnp.argmax(_logits(model, padded)[0, len(tokens) - 1])))
  return tokens[len(prompt):]


def test_unknown_family_is_a_clear_error():
  with pytest.raises(ValueError, match=r"unknown model family 'mamba'.*llama"):
    specjax.ModelConfig(**SHAPE, family="mamba")
  with pytest.raises(ValueError, match="known families: llama"):
    get_family("mamba")
  with pytest.raises(ValueError, match="already registered"):
    register_family(ModelFamily(name="llama", module=LayerNormLlama, block=LayerNormBlock, norm=LayerNorm,
                                rope_tables=rope_tables, chain_block=llama.chain_block))


def test_family_is_part_of_the_config(config):
  assert config.to_dict()["family"] == FAMILY.name
  assert specjax.ModelConfig.from_dict(config.to_dict()) == config
  saved_before = {k: v for k, v in config.to_dict().items() if k != "family"}  # a config saved without the field
  assert specjax.ModelConfig.from_dict(saved_before).family == "llama"
  assert FAMILY.name in known_families()


def test_init_model_builds_the_familys_module(config, model):
  assert type(model.module()) is LayerNormLlama
  assert all(type(n) is LayerNorm for n in (model.module().final_norm, model.module().layers[0].attn_norm))
  as_llama = specjax.init_model(config.replace(family="llama"), seed=4)
  assert set(model.flat_params()) == set(as_llama.flat_params())
  tokens = jnp.asarray([PROMPTS[0]], jnp.int32)
  assert not np.allclose(_logits(model, tokens), _logits(as_llama, tokens), atol=1e-3)  # its norm is the one used
  counted = sum(x.size for x in jax.tree.leaves(model.params))
  assert config.param_count() == counted == llama.param_count(config)  # counted from an abstract module


def test_greedy_generate_is_the_models_greedy(model, greedy):
  assert greedy == [reference_greedy(model, prompt, NEW_TOKENS) for prompt in PROMPTS]


def test_params_shard_over_a_mesh_with_the_familys_rules(config, model, greedy):
  mesh = make_mesh(2, 4)
  shardings = param_shardings(mesh, config, model.params)
  specs = {".".join(map(str, path)): var.get_value().spec for path, var in nnx.to_flat_state(shardings)}
  assert specs["layers.0.attn.q.kernel"] == P(None, "model")
  assert specs["layers.0.attn.k.kernel"] == P()  # 2 KV heads do not split 4 ways
  assert specs["layers.0.mlp.down.kernel"] == P("model", None)
  assert specs["embed"] == P("model", None) and specs["final_norm.scale"] == P()
  placed = jax.device_put(model.params, shardings)
  assert len(placed["layers"][0]["attn"]["q"]["kernel"][...].sharding.device_set) == 8
  out = specjax.generate(model, PROMPTS, max_new_tokens=NEW_TOKENS, sampling=GREEDY, mesh=mesh)
  assert out.tokens == greedy


def test_layer_skip_drafts_with_the_familys_layers(model, greedy):
  skip = LayerSkip.create(model, n_layers=1, adapter_rank=4)
  assert isinstance(skip.model.module(), LayerNormLlama) and type(skip.model.module().exit_adapter.norm) is LayerNorm
  assert sorted(truncated_model(model, 1).flat_params()) == sorted(
      name for name in model.flat_params() if not name.startswith(("layers.1.", "layers.2.")))
  assert specjax.generate(model, PROMPTS, max_new_tokens=NEW_TOKENS, sampling=GREEDY, drafter=skip, k=3).tokens == greedy


def test_feature_head_drafts_with_the_familys_block(model, greedy):
  head = FeatureHead.create(model)
  net = head.module(head.net)
  assert type(net.block) is LayerNormBlock and type(net.layer_norms[0]) is LayerNorm
  reads = [get_family(model.config.family).reading_norm(i, 3) for i in head.config.feature_layers]
  for norm, name in zip(net.layer_norms, reads):
    np.testing.assert_array_equal(norm.scale[...], model.flat_params()[name])
  assert specjax.generate(model, PROMPTS, max_new_tokens=NEW_TOKENS, sampling=GREEDY, drafter=head, k=3).tokens == greedy
