"""BlockDrafter: exact under the rejection sampler, greedy = autoregressive (fixed and adaptive K, tiny and real
targets), its state after rounds of any acceptance is a fresh prefill's, its training forward is the drafting
computation under a block-diagonal mask, and the DFlash objective weights positions and learns."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import specjax
from specjax.cache import init_cache
from specjax.drafters import registry
from specjax.drafters.base import TargetFeatures
from specjax.drafters.block_drafter import BlockDrafter, BlockDrafterConfig
from specjax.drafters.vocab_head import head_logits
from specjax.engine import target_features
from specjax.kernels import use_kernels
from specjax.model import model_from_flat_params
from specjax.policy import SpeculationPolicy
from specjax.sampling import SamplingParams
from specjax.training.objectives import block_drafter_objective, random_anchors

CONFIG = specjax.ModelConfig(vocab_size=48, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, ffn_dim=64,
                             max_seq_len=128)


@pytest.fixture(scope="module")
def target():
  return specjax.init_model(CONFIG, seed=1)


def _drafter(target, block_size=5, seed=4, **changes):
  return BlockDrafter.create(target, BlockDrafterConfig.for_target(target.config, block_size=block_size, **changes),
                             seed=seed)


def _features(target, drafter, tokens_BxS):
  batch, size = tokens_BxS.shape
  positions = jnp.broadcast_to(jnp.arange(size, dtype=jnp.int32), (batch, size))
  return target_features(target.module(), jnp.asarray(tokens_BxS), positions, init_cache(target.config, batch, size),
                         drafter.feature_layers)[2]


def _prefix(features, end):
  return TargetFeatures(hidden_BxTxD=features.hidden_BxTxD[:, :end], layers_BxTxLxD=features.layers_BxTxLxD[:, :end])


@pytest.mark.parametrize("sampling,k,block_size,vocab_ids,previous_feature", [
    (SamplingParams(temperature=1.0), 3, 4, None, False),
    (SamplingParams(temperature=0.7, top_k=3), 2, 6, [0, 2, 5, 7], False),
    (SamplingParams(temperature=1.0), 3, 4, None, True),
], ids=["full-vocab-T1-K3-B4", "draft-vocab-T0.7-topk3-K2-B6", "previous-feature-T1-K3-B4"])
def test_exact(exactness_target, assert_exact, sampling, k, block_size, vocab_ids, previous_feature):
  config = BlockDrafterConfig.for_target(exactness_target.config, draft_vocab_size=len(vocab_ids or []),
                                         block_size=block_size, previous_feature=previous_feature)
  drafter = BlockDrafter.create(exactness_target, config, seed=1, vocab_ids=vocab_ids)
  stats = assert_exact(exactness_target, drafter, sampling, k, seed=11 + k)
  assert 0.0 < stats.acceptance_rate < 1.0


@pytest.mark.parametrize("k", [4, 2, SpeculationPolicy(ks=(1, 3), probe_interval=1, prior_alpha=0.0)],
                         ids=["K=B-1", "K<B-1", "adaptive"])
@pytest.mark.parametrize("previous_feature", [False, True], ids=["", "previous-feature"])
def test_greedy_is_autoregressive(exactness_target, assert_greedy_is_autoregressive, k, previous_feature):
  """Any K up to B - 1; the adaptive policy's K = 0 rounds call observe and commit one feature."""
  assert_greedy_is_autoregressive(exactness_target, _drafter(exactness_target, seed=2,
                                                             previous_feature=previous_feature), k=k)


def test_smollm2_greedy_equals_greedy(smollm2_model):
  tokens = smollm2_model.tokenizer.encode("The quick brown fox jumps over the lazy dog near the river bank. The quick")
  greedy = SamplingParams(temperature=0.0)
  ar = specjax.generate(smollm2_model, [tokens], max_new_tokens=16, sampling=greedy, stop_at_eos=False)
  spec = specjax.generate(smollm2_model, [tokens], max_new_tokens=16, sampling=greedy,
                          drafter=_drafter(smollm2_model, block_size=8, n_layers=1), k=4, stop_at_eos=False)
  assert spec.tokens == ar.tokens


@pytest.mark.parametrize("previous_feature", [False, True], ids=["", "previous-feature"])
def test_state_after_rounds_equals_a_fresh_prefill(target, assert_state_is_a_fresh_prefill, previous_feature):
  """Rounds of any K (0: observe) and any acceptance counts, a partially accepted block included, leave the state a
  fresh prefill of the committed sequence would have: the next proposals' q match."""
  assert_state_is_a_fresh_prefill(target, _drafter(target, previous_feature=previous_feature))


@pytest.mark.parametrize("kernels,previous_feature", [(True, False), (False, False), (True, True)],
                         ids=["cpu-kernel", "xla-attention", "previous-feature"])
def test_training_forward_is_the_drafting_computation(target, kernels, previous_feature):
  """anchored() at anchor n - 1 (beside another block) gives the q that propose() drew each draft from, at K = B - 1
  and at a shorter K (which keeps the first K of the same block), through either cache attention; with
  previous_feature, the first input's context of position n - 2 is the same in both."""
  drafter = _drafter(target, previous_feature=previous_feature)
  params, n = drafter.params(), 11
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 48, (2, 32)), jnp.int32)
  features = _features(target, drafter, tokens)
  state = drafter.init(params, tokens, jnp.full((2,), n - 1, jnp.int32), 16, features=_prefix(features, 16))
  keys = jax.random.split(jax.random.key(0), 2)
  net = drafter.module(params["net"])
  out = net.anchored(params["frozen"], features.layers_BxTxLxD, tokens, jnp.asarray([[n - 1, 20], [3, n - 1]]), 5)
  for k in (4, 2):
    with use_kernels(kernels):
      _, q, _ = drafter.propose(params, state, tokens, jnp.full((2,), n, jnp.int32), k, SamplingParams(), keys)
    expected = jax.nn.softmax(head_logits(params["frozen"], jnp.stack([out[0, 0], out[1, 1]])[:, 1:k + 1]), axis=-1)
    np.testing.assert_allclose(np.asarray(q), np.asarray(expected), atol=2e-5)


def test_training_mask_is_block_diagonal(target):
  """A block's outputs do not change with another block's tokens nor with the context at or after its anchor;
  they do change with the context before it."""
  drafter = _drafter(target)
  params = drafter.params()
  net, frozen = drafter.module(params["net"]), params["frozen"]
  tokens = np.random.default_rng(2).integers(0, 48, (1, 32)).astype(np.int32)
  layers = _features(target, drafter, tokens).layers_BxTxLxD
  anchors = jnp.asarray([[5, 12, 20]])
  base = net.anchored(frozen, layers, jnp.asarray(tokens), anchors, 5)
  other_tokens = tokens.copy()
  other_tokens[0, [12, 20]] = (tokens[0, [12, 20]] + 1) % 48
  later_context = layers.at[:, 5:].add(1.0)
  for changed in (net.anchored(frozen, layers, jnp.asarray(other_tokens), anchors, 5),
                  net.anchored(frozen, later_context, jnp.asarray(tokens), anchors, 5)):
    np.testing.assert_allclose(np.asarray(changed[:, 0]), np.asarray(base[:, 0]), atol=1e-6)
    assert not np.allclose(np.asarray(changed[:, 1:]), np.asarray(base[:, 1:]), atol=1e-3)
  earlier_context = net.anchored(frozen, layers.at[:, 4].add(1.0), jnp.asarray(tokens), anchors, 5)
  assert not np.allclose(np.asarray(earlier_context[:, 0]), np.asarray(base[:, 0]), atol=1e-3)


def _batch(target, drafter, rows=4, length=24, seed=3, tokens=None):
  tokens = np.random.default_rng(seed).integers(0, 48, (rows, length)).astype(np.int32) if tokens is None else tokens
  features = _features(target, drafter, tokens)
  return {"tokens": jnp.asarray(tokens), "mask": jnp.ones((rows, length), bool), "hidden": features.hidden_BxTxD,
          "layers": features.layers_BxTxLxD}


def test_random_anchors_are_distinct_scored_positions():
  mask = jnp.asarray(np.arange(20)[None, :] % 3 != 0).repeat(2, axis=0)
  anchors, valid = random_anchors(jnp.zeros((2, 20), jnp.int32), mask, 6)
  assert bool(valid.all()) and all(len(set(row)) == 6 for row in np.asarray(anchors).tolist())
  assert bool(mask[jnp.arange(2)[:, None], anchors].all()) and int(anchors.max()) < 19
  anchors, valid = random_anchors(jnp.ones((2, 20), jnp.int32), mask.at[:, 4:].set(False), 6)
  assert int(valid.sum(axis=1).max()) == 2  # positions 1 and 2 only; the rest marked invalid


def test_position_weights_decay_along_the_block(target):
  """gamma -> 0 scores the first mask position only; gamma -> inf every position alike (the plain mean)."""
  drafter = _drafter(target)
  batch = _batch(target, drafter)
  losses = {}
  for gamma in (1e-4, 2.0, 1e6):
    objective = block_drafter_objective(drafter, anchors=6, gamma=gamma, ce_weight=0.0, kl_weight=1.0)
    losses[gamma], metrics = objective.loss(objective.trainable, objective.frozen, batch)
  np.testing.assert_allclose(float(losses[1e-4]), float(metrics["kl_1"]), rtol=1e-5)
  np.testing.assert_allclose(float(losses[1e6]), float(metrics["kl"]), rtol=1e-4)
  anchors, _ = random_anchors(batch["tokens"], batch["mask"], 6)
  counts = np.array([(np.asarray(anchors) + j < 24).sum() for j in range(1, 5)])  # labels inside the rows
  weights = np.exp(-np.arange(4) / 2.0) * counts
  per_position = np.array([float(metrics[f"kl_{j}"]) for j in range(1, 5)])
  np.testing.assert_allclose(float(losses[2.0]), (weights * per_position).sum() / weights.sum(), rtol=1e-5)
  assert not np.isclose(float(losses[2.0]), float(metrics["kl"]), rtol=1e-3)


def test_the_objective_learns(target):
  """A few steps on text whose continuation the block can learn (token t + j = token t + 5 j) lower the loss."""
  drafter = _drafter(target, block_size=4)
  batch = _batch(target, drafter, tokens=(np.arange(4)[:, None] * 11 + 5 * np.arange(24)[None, :]) % 48)
  objective = block_drafter_objective(drafter, anchors=8, gamma=4.0, ce_weight=1.0, kl_weight=1.0)
  opt = optax.adam(1e-2)

  @jax.jit
  def step(params, opt_state):
    (loss, _), grads = jax.value_and_grad(objective.loss, has_aux=True)(params, objective.frozen, batch)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  params, opt_state = objective.trainable, opt.init(objective.trainable)
  losses = []
  for _ in range(15):
    params, opt_state, loss = step(params, opt_state)
    losses.append(float(loss))
  assert losses[-1] < 0.9 * losses[0] and all(b < a for a, b in zip(losses, losses[1:])), losses
  assert isinstance(objective.drafter(params), BlockDrafter)


def test_registry_and_static_identity(target):
  entry = registry.get("block_drafter")
  assert entry.drafter is BlockDrafter and entry.trainable and entry.needs_trained_dir
  assert isinstance(registry.build("block_drafter", target, registry.UNTRAINED), BlockDrafter)
  a, b = _drafter(target, seed=0), _drafter(target, seed=1)
  assert a == b and hash(a) == hash(b) and a != _drafter(target, block_size=6)
  assert (a.max_k, a.feature_layers, a.config.n_layers) == (4, (0, 1, 2), 2)


def test_bad_input_is_a_clear_error(target):
  with pytest.raises(ValueError, match=r"feature_layers \(0, 5\) outside the target's 3 layers"):
    BlockDrafterConfig.for_target(target.config, feature_layers=(0, 5))
  config = BlockDrafterConfig.for_target(target.config)
  with pytest.raises(ValueError, match="outside the target's 3 layers"):
    BlockDrafter.create(target, dataclasses.replace(config, feature_layers=(1, 3)))
  with pytest.raises(ValueError, match="block_size"):
    BlockDrafterConfig.for_target(target.config, block_size=1)
  with pytest.raises(ValueError, match="block_size"):
    BlockDrafterConfig.for_target(target.config, block_size=CONFIG.max_seq_len + 1)
  drafter = _drafter(target)
  with pytest.raises(ValueError, match=r"max_k=4"):
    specjax.generate(target, [[1, 2, 3]], max_new_tokens=4, drafter=drafter, k=5)
  tokens = jnp.zeros((1, 16), jnp.int32)
  features = _features(target, drafter, tokens)
  with pytest.raises(ValueError, match="reads target layers"):
    drafter.init(drafter.params(), tokens, jnp.asarray([3]), 16, features=None)
  state = drafter.init(drafter.params(), tokens, jnp.asarray([3]), 16, features=features)
  with pytest.raises(ValueError, match=r"drafts 1..4 tokens a round \(block_size 5"):
    drafter.propose(drafter.params(), state, tokens, jnp.asarray([4]), 5, SamplingParams(), jax.random.split(
        jax.random.key(0), 1))


def test_started_from_target_attends_over_the_targets_own_entries(target):
  """With the top feature layer just below the copied layers, the first layer's context keys and values are the
  target's own cache entries at that layer; the blocks and output norm are the target's; a shape that cannot be
  copied is a clear error. The target's norm scales are made unlike 1 so that each must land in its place."""
  rng = np.random.default_rng(6)
  target = model_from_flat_params(target.config, {
      name: value * (0.5 + rng.random(value.shape)) if name.endswith("norm.scale") else value
      for name, value in target.flat_params().items()})
  drafter = _drafter(target, n_layers=1, feature_layers=(0, 1)).started_from_target(target)
  tokens = jnp.asarray(np.random.default_rng(5).integers(0, 48, (2, 12)), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(12, dtype=jnp.int32), (2, 12))
  _, target_cache, features = target_features(target.module(), tokens, positions, init_cache(target.config, 2, 12),
                                              drafter.feature_layers)
  state = drafter.init(drafter.params(), tokens, jnp.full((2,), 11, jnp.int32), 12, features=features)
  for got, want in ((state["cache"].k, target_cache.k), (state["cache"].v, target_cache.v)):
    np.testing.assert_allclose(np.asarray(got[0, :, :12]), np.asarray(want[2, :, :12]), rtol=1e-4, atol=1e-4)
  flat, net = target.flat_params(), drafter.module(drafter.net)
  np.testing.assert_array_equal(np.asarray(net.layers[0].mlp.up.kernel[...]), np.asarray(flat["layers.2.mlp.up.kernel"]))
  np.testing.assert_array_equal(np.asarray(net.out_norm.scale[...]), np.asarray(flat["final_norm.scale"]))
  with pytest.raises(ValueError, match="cannot start from the last layers"):
    _drafter(target, ffn_dim=16).started_from_target(target)
  with pytest.raises(ValueError, match="strictly increasing"):
    _drafter(target, feature_layers=(1, 0))
