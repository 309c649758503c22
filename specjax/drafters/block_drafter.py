"""DFlash-style block drafter: a few decoder layers that draft K tokens in one forward pass over a block.

The block is [the last (not yet verified) token, MASK x (B - 1)] at positions seq_len - 1 .. seq_len - 2 + B, B the
trained block size whatever K: a round of K < B - 1 keeps the first K drafts (the masks of a shorter block would
see a block unlike any in training; the extra positions cost little in the one forward). Every layer attends
bidirectionally within the block and to context keys and values that its own k/v projections make of a fusion of
several target layers' features at the committed positions (DFlash injects the target as extra K/V in every
layer). The output at mask position j, through the draft's norm and the target's frozen head, is the distribution
of the token at that position. Each draft is drawn from its own position's q_j, independently, so q_j is also its
distribution given the earlier drafts and the rejection sampler's chain rule stays exact. MASK is a learned
embedding of the drafter (DFlash uses the target embedding's row of a reserved mask token). With previous_feature
the first position's input also holds the fused features of the position before it, as an EAGLE head's does.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.attention import Bidirectional
from specjax.cache import KVCache, init_cache
from specjax.config import ModelConfig
from specjax.drafters.feature_head import (FeatureHeadConfig, linear, checked_feature_layers, fuse_layers,
                                           start_layer_norms)
from specjax.drafters.trained_head import TrainedHead
from specjax.drafters.vocab_head import embed_tokens, vocab_logits
from specjax.model import Model
from specjax.models import get_family
from specjax.sampling import draw_tokens


@dataclasses.dataclass(frozen=True)
class BlockDrafterConfig(FeatureHeadConfig):
  """A FeatureHeadConfig with n_layers decoder layers and the trained block size B (drafts up to B - 1 a round);
  previous_feature adds the fused features of the position before the block to its first input."""

  n_layers: int = 2
  block_size: int = 8
  previous_feature: bool = False

  def __post_init__(self):
    super().__post_init__()
    if not 2 <= self.block_size <= self.max_seq_len:
      raise ValueError(f"a BlockDrafter needs block_size in [2, max_seq_len {self.max_seq_len}], "
                       f"got {self.block_size}")

  @classmethod
  def for_target(cls, target: ModelConfig, feature_layers=None, ffn_dim: int = 0, draft_vocab_size: int = 0,
                 n_layers: int = 2, block_size: int = 8, previous_feature: bool = False):
    """Feature layers as FeatureHeadConfig's (low, middle, high; DFlash spreads one per draft layer over
    [1, n - 3]); attention shapes and RoPE the target's."""
    config = super().for_target(target, feature_layers, ffn_dim, draft_vocab_size, n_layers)
    return dataclasses.replace(config, block_size=block_size, previous_feature=previous_feature)


class BlockNet(nnx.Module):
  """Per-layer norms and `fuse` (as FeatureNet's), the context norm, the MASK embedding, n_layers decoder blocks
  and the output norm; blocks and norms are the target family's."""

  def __init__(self, config: BlockDrafterConfig, rngs: nnx.Rngs):
    d, eps, family = config.d_model, config.norm_eps, get_family(config.family)
    if family.context_kv is None or family.masked_block is None:
      raise ValueError(f"model family {config.family!r} has no context_kv / masked_block hooks: no BlockDrafter")
    self.layer_config = config.layer_config()
    self.previous_feature = config.previous_feature
    self.layer_norms = nnx.List([family.norm(d, eps, jnp.float32) for _ in config.feature_layers])
    self.fuse = linear(len(config.feature_layers) * d, d, rngs)
    self.context_norm = family.norm(d, eps, jnp.float32)
    self.mask_embed = nnx.Param(jnp.zeros((d,), jnp.float32))
    self.layers = nnx.List([family.block(self.layer_config, rngs) for _ in range(config.n_layers)])
    self.out_norm = family.norm(d, eps, jnp.float32)

  @property
  def family(self):
    return get_family(self.layer_config.family)

  def context(self, layers_BxTxLxD: jax.Array) -> jax.Array:
    """The fused target features every layer makes its context keys and values of, [B, T, D]."""
    return self.context_norm(fuse_layers(self.layer_norms, self.fuse, layers_BxTxLxD))

  def context_at(self, layers_BxTxLxD: jax.Array, index_B: jax.Array) -> jax.Array:
    """The fused context of one position per row, [B, D]."""
    rows_B = jnp.arange(layers_BxTxLxD.shape[0])
    return self.context(layers_BxTxLxD[rows_B, index_B][:, None])[:, 0]

  def write_context(self, cache: KVCache, layers_BxTxLxD: jax.Array, positions_BxT: jax.Array) -> KVCache:
    """The cache with every layer's context entries at these (per row consecutive) positions."""
    context = self.context(layers_BxTxLxD)
    cos, sin = self.family.rope_tables(self.layer_config, positions_BxT)
    for index, block in enumerate(self.layers):
      k, v = self.family.context_kv(block, context, cos, sin)
      cache = cache.write(index, k, v, positions_BxT)
    return cache

  def block_inputs(self, frozen: dict, first_BxN: jax.Array, size: int, previous_BxNxD=None) -> jax.Array:
    """[B, N, size, D]: each block's first token's embedding (plus, given, the context of the position before
    it), then MASK."""
    first = embed_tokens(frozen, first_BxN)
    first = (first if previous_BxNxD is None else first + previous_BxNxD)[:, :, None]
    masks = jnp.broadcast_to(self.mask_embed[...], first.shape[:2] + (size - 1, first.shape[-1]))
    return jnp.concatenate([first, masks], axis=2)

  def __call__(self, x_BxTxD, slots_BxT, cache: KVCache):
    """One block per row in consecutive slots of the draft cache, each position seeing every other and the
    context before the block. Returns the normed outputs [B, T, D] and the cache."""
    cos, sin = self.family.rope_tables(self.layer_config, slots_BxT)
    for index, block in enumerate(self.layers):
      x_BxTxD, cache = block(x_BxTxD, cos, sin, slots_BxT, cache, index, Bidirectional())
    return self.out_norm(x_BxTxD), cache

  def anchored(self, frozen: dict, layers_BxTxLxD, tokens_BxT, anchors_BxN, size: int) -> jax.Array:
    """Training: for each anchor a the block [token a, MASK x (size - 1)] at positions a .. a + size - 1, all in one
    forward; a block's queries see the context of positions < a and their own block only (block-diagonal), as
    `propose`'s block sees the committed positions. Returns the normed outputs [B, N, size, D]."""
    batch, t_len = tokens_BxT.shape
    n = anchors_BxN.shape[1]
    family = self.family
    context = self.context(layers_BxTxLxD)
    cos_c, sin_c = family.rope_tables(self.layer_config, jnp.broadcast_to(jnp.arange(t_len), (batch, t_len)))
    previous = None
    if self.previous_feature:
      at_BxN = jnp.maximum(anchors_BxN - 1, 0)
      previous = jnp.take_along_axis(context, at_BxN[:, :, None], axis=1) * (anchors_BxN > 0)[:, :, None]
    x = self.block_inputs(frozen, jnp.take_along_axis(tokens_BxT, anchors_BxN, axis=1), size, previous)
    x = x.reshape(batch, n * size, -1)
    anchor_BxQ = jnp.repeat(anchors_BxN, size, axis=1)
    cos_q, sin_q = family.rope_tables(self.layer_config, anchor_BxQ + jnp.tile(jnp.arange(size), n)[None, :])
    block_Q = jnp.repeat(jnp.arange(n), size)
    visible_BxQxTQ = jnp.concatenate([
        jnp.arange(t_len)[None, None, :] < anchor_BxQ[:, :, None],
        jnp.broadcast_to(block_Q[:, None] == block_Q[None, :], (batch, n * size, n * size))], axis=-1)
    for block in self.layers:
      k, v = family.context_kv(block, context, cos_c, sin_c)
      x = family.masked_block(block, x, cos_q, sin_q, k, v, visible_BxQxTQ)
    return self.out_norm(x).reshape(batch, n, size, -1)


class BlockDrafter(TrainedHead):
  """The drafter. Draft state: its KV cache, whose entries below seq_len - 1 are the context keys and values of
  the committed positions (written at `init` and `commit` from the target's features), and round_len_B."""

  net_class, config_class = BlockNet, BlockDrafterConfig

  def __init__(self, config: BlockDrafterConfig, net: nnx.State, frozen: dict):
    super().__init__(config, net, frozen)
    self.max_k = config.block_size - 1
    self.max_seq_len = config.max_seq_len

  @property
  def feature_layers(self) -> tuple[int, ...]:
    return self.config.feature_layers

  @classmethod
  def initial_net(cls, target: Model, config: BlockDrafterConfig, seed: int) -> nnx.State:
    """Per-layer norms as FeatureHead's start; MASK starts as the mean token embedding."""
    checked_feature_layers(target.config, config.feature_layers)
    net = BlockNet(config, nnx.Rngs(seed))
    start_layer_norms(net.layer_norms, target, config.feature_layers)
    net.mask_embed[...] = jnp.mean(jnp.asarray(target.flat_params()["embed"], jnp.float32), axis=0)
    return nnx.split(net)[1]

  def started_from_target(self, target: Model) -> "BlockDrafter":
    """This drafter with its decoder blocks set to the target's last n_layers layers, its output norm to the
    target's final norm, and its context to the highest feature layer through the norm in front of the first of
    those layers: with feature layers ending at n - n_layers - 1 (SmolLM2's 27 of 30, 2 layers), the first layer's
    context keys and values are the target's own at that layer. The other feature layers start with zero weight."""
    n, flat = target.config.n_layers, target.flat_params()
    family, config = get_family(target.config.family), self.config
    if config.layer_config().ffn_dim != target.config.ffn_dim or config.n_layers > n:
      raise ValueError(f"a BlockDrafter of {config.n_layers} layers with ffn_dim {config.ffn_dim} cannot start from "
                       f"the last layers of a {n}-layer target with ffn_dim {target.config.ffn_dim}")
    net = self.module(self.net)
    first, top = n - config.n_layers, len(config.feature_layers) - 1  # layers are increasing: the last is the top
    for index, block in enumerate(net.layers):
      prefix = f"{family.layers}.{first + index}."
      for path, var in nnx.to_flat_state(nnx.state(block, nnx.Param)):
        var[...] = jnp.asarray(flat[prefix + ".".join(map(str, path))], jnp.float32)
    net.out_norm.scale[...] = jnp.asarray(flat[family.final_norm], jnp.float32)
    d = config.d_model
    net.layer_norms[top].scale[...] = jnp.ones((d,), jnp.float32)
    eye = jnp.eye(d, dtype=jnp.float32)
    net.fuse.kernel[...] = jnp.zeros_like(net.fuse.kernel[...]).at[top * d:(top + 1) * d].set(eye)
    net.context_norm.scale[...] = jnp.asarray(flat[family.reading_norm(config.feature_layers[top], n)], jnp.float32)
    return self.with_net(nnx.split(net)[1])

  def _checked_features(self, features):
    if features is None or features.layers_BxTxLxD.shape[2] != len(self.feature_layers):
      got = None if features is None else features.layers_BxTxLxD.shape[2]
      raise ValueError(f"BlockDrafter reads target layers {self.feature_layers}; got features of {got} layers")
    return features.layers_BxTxLxD

  def init(self, params, tokens_BxS, prompt_len_B, prompt_bucket, features=None):
    layers_BxTxLxD = self._checked_features(features)
    net = self.module(params["net"])
    batch, size = tokens_BxS.shape
    cache = init_cache(net.layer_config, batch, size + self.config.block_size, dtype=jnp.float32)
    positions = jnp.broadcast_to(jnp.arange(prompt_bucket, dtype=jnp.int32), (batch, prompt_bucket))
    state = {"cache": net.write_context(cache, layers_BxTxLxD, positions),
             "round_len_B": (prompt_len_B + 1).astype(jnp.int32)}
    if self.config.previous_feature:  # the first block's root is the token after the prompt
      state["previous_BxD"] = net.context_at(layers_BxTxLxD, (prompt_len_B - 1).astype(jnp.int32))
    return state

  def observe(self, params, state, tokens_BxS, seq_len_B):
    return dict(state, round_len_B=seq_len_B.astype(jnp.int32))

  def propose(self, params, state, tokens_BxS, seq_len_B, k, sampling, keys_B):
    """One forward over the block; its entries land in the cache (room for a block past the last token) at
    seq_len - 1 .., and `commit` rewrites them from the target's features before any later block reads them."""
    if not 1 <= k <= self.max_k:
      raise ValueError(f"BlockDrafter drafts 1..{self.max_k} tokens a round (block_size {self.config.block_size} "
                       f"was trained), not K={k}")
    net, frozen, size = self.module(params["net"]), params["frozen"], self.config.block_size
    root_B = (seq_len_B - 1).astype(jnp.int32)
    previous = state["previous_BxD"][:, None] if self.config.previous_feature else None
    x_BxBsxD = net.block_inputs(frozen, jnp.take_along_axis(tokens_BxS, root_B[:, None], axis=1), size,
                                previous)[:, 0]
    slots_BxBs = root_B[:, None] + jnp.arange(size, dtype=jnp.int32)[None, :]
    out_BxBsxD, cache = net(x_BxBsxD, slots_BxBs, state["cache"])
    keys_BxK = jax.vmap(lambda key: jax.random.split(key, k))(keys_B)
    logits_BxKxV = vocab_logits(frozen, out_BxBsxD[:, 1:k + 1])   # one product over the block's rows
    draft_BxK, q_BxKxV = jax.vmap(lambda logits, key: draw_tokens(key, logits, sampling), in_axes=1, out_axes=1)(
        logits_BxKxV, keys_BxK)
    return draft_BxK, q_BxKxV, dict(state, cache=cache, round_len_B=seq_len_B.astype(jnp.int32))

  def commit(self, params, state, n_accepted_B, seq_len_B, features=None):
    """Context entries of the K + 1 verified positions from the target's features; those past the accepted
    drafts are rewritten by the next commit before any block reads them (any K, K = 0 included)."""
    layers_BxK1xLxD = self._checked_features(features)
    k1 = layers_BxK1xLxD.shape[1]
    positions_BxK1 = state["round_len_B"][:, None] - 1 + jnp.arange(k1, dtype=jnp.int32)[None, :]
    net = self.module(params["net"])
    state = dict(state, cache=net.write_context(state["cache"], layers_BxK1xLxD, positions_BxK1))
    if self.config.previous_feature:  # the next root follows the last accepted draft, at index n_accepted
      state["previous_BxD"] = net.context_at(layers_BxK1xLxD, n_accepted_B.astype(jnp.int32))
    return state
