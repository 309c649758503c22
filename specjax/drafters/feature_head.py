"""EAGLE-3 style feature head: a small decoder (one layer by default) that drafts at the feature level.

Its input at position p is a fusion of the target's low, middle and high layer features at p - 1 with the
embedding of token p; its output (after its own norm and the target's frozen head) is the distribution of token
p + 1, and the output itself replaces the fused target feature for the next draft step. The target's features
arrive with its prefill and with every verify call, so drafting costs no extra target pass.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.cache import KVCache, init_cache
from specjax.config import ModelConfig
from specjax.drafters.trained_head import TrainedHead
from specjax.drafters.vocab_head import draw, embed_tokens, vocab_logits
from specjax.model import Model
from specjax.models import get_family
from specjax.trees.grow import grow


@dataclasses.dataclass(frozen=True)
class FeatureHeadConfig:
  """Shape of the head; jit-static. Attention shapes and RoPE follow the target unless overridden."""

  d_model: int
  n_heads: int
  n_kv_heads: int
  ffn_dim: int
  vocab_size: int
  draft_vocab_size: int
  feature_layers: tuple[int, ...]
  rope_theta: float = 10000.0
  norm_eps: float = 1e-5
  head_dim: int = 0
  rope_scaling: tuple = ()
  max_seq_len: int = 2048
  family: str = "llama"  # the target's model family: its block, norm and RoPE
  n_layers: int = 1      # decoder layers (EAGLE-3 has one)

  def __post_init__(self):
    if not self.feature_layers:
      raise ValueError("FeatureHeadConfig.feature_layers must name at least one target layer")
    if self.n_layers < 1:
      raise ValueError(f"{type(self).__name__}.n_layers must be at least 1, got {self.n_layers}")
    object.__setattr__(self, "feature_layers", tuple(int(i) for i in self.feature_layers))

  @classmethod
  def for_target(cls, target: ModelConfig, feature_layers=None, ffn_dim: int = 0, draft_vocab_size: int = 0,
                 n_layers: int = 1):
    """Low, middle and high layers by default (2, n/2, n-3 as in EAGLE-3, clipped for shallow targets)."""
    layers = checked_feature_layers(target, feature_layers)
    return cls(d_model=target.d_model, n_heads=target.n_heads, n_kv_heads=target.n_kv_heads,
               ffn_dim=ffn_dim or target.ffn_dim, vocab_size=target.vocab_size,
               draft_vocab_size=draft_vocab_size or target.vocab_size, feature_layers=tuple(layers),
               rope_theta=target.rope_theta, norm_eps=target.norm_eps, head_dim=target.head_dim,
               rope_scaling=target.rope_scaling, max_seq_len=target.max_seq_len, family=target.family,
               n_layers=n_layers)

  def layer_config(self) -> ModelConfig:
    """The decoder layers as a ModelConfig (float32: the head trains and drafts in float32)."""
    return ModelConfig(vocab_size=self.vocab_size, d_model=self.d_model, n_layers=self.n_layers, n_heads=self.n_heads,
                       n_kv_heads=self.n_kv_heads, ffn_dim=self.ffn_dim, max_seq_len=self.max_seq_len,
                       rope_theta=self.rope_theta, norm_eps=self.norm_eps, head_dim=self.head_dim,
                       rope_scaling=self.rope_scaling, family=self.family)


def checked_feature_layers(target: ModelConfig, feature_layers=None) -> tuple[int, ...]:
  """`feature_layers`, or low, middle and high (2, n/2, n-3 as in EAGLE-3, clipped for shallow targets); a layer
  the target does not have, or layers out of order (the target hands features over in layer order), is a
  ValueError."""
  n = target.n_layers
  layers = tuple(feature_layers or sorted({min(2, n - 1), n // 2, max(n - 3, 0)}))
  if any(not 0 <= i < n for i in layers):
    raise ValueError(f"feature_layers {layers} outside the target's {n} layers")
  if list(layers) != sorted(set(layers)):
    raise ValueError(f"feature_layers {layers} must be strictly increasing (features come in layer order)")
  return layers


def fuse_layers(layer_norms, fuse, layers_BxTxLxD: jax.Array) -> jax.Array:
  """Each target layer's residual stream through its own norm, concatenated and projected to D."""
  layers = layers_BxTxLxD.astype(jnp.float32)
  return fuse(jnp.concatenate([norm(layers[:, :, i]) for i, norm in enumerate(layer_norms)], axis=-1))


def start_layer_norms(layer_norms, target: Model, feature_layers) -> None:
  """Layer i's norm starts as the target's norm in front of layer i + 1 (the final norm after the last)."""
  flat, family = target.flat_params(), get_family(target.config.family)
  for norm, layer in zip(layer_norms, feature_layers):
    norm.scale[...] = flat[family.reading_norm(layer, target.config.n_layers)].astype(jnp.float32)


def linear(d_in: int, d_out: int, rngs: nnx.Rngs) -> nnx.Linear:
  """A bias-free projection started at variance 1 / d_in (the trained heads' fuse and mix layers)."""
  return nnx.Linear(d_in, d_out, use_bias=False, rngs=rngs, kernel_init=nnx.initializers.normal(d_in**-0.5))


class FeatureNet(nnx.Module):
  """Per-layer norms, fuse (L*D -> D), mix ([feature; embedding] -> D), n_layers decoder blocks (`block`, then
  `upper_blocks`: a one-layer head's files predate the option), output norm: norms and blocks the target family's.

  The per-layer norms matter: residual streams carry a few huge dimensions (hundreds, against an RMS of ~5-25 in
  SmolLM2), which a plain concatenation would let dominate; FeatureHead.create starts them at the scales the
  target's own next layer reads each stream with."""

  def __init__(self, config: FeatureHeadConfig, rngs: nnx.Rngs):
    d, eps, family = config.d_model, config.norm_eps, get_family(config.family)
    self.layer_config = config.layer_config()
    self.layer_norms = nnx.List([family.norm(d, eps, jnp.float32) for _ in config.feature_layers])
    self.fuse = linear(len(config.feature_layers) * d, d, rngs)
    self.feature_norm = family.norm(d, eps, jnp.float32)
    self.embed_norm = family.norm(d, eps, jnp.float32)
    self.mix = linear(2 * d, d, rngs)
    self.block = family.block(self.layer_config, rngs)
    self.upper_blocks = nnx.List([family.block(self.layer_config, rngs) for _ in range(config.n_layers - 1)])
    self.out_norm = family.norm(d, eps, jnp.float32)

  @property
  def family(self):
    return get_family(self.layer_config.family)

  @property
  def blocks(self) -> list:
    return [self.block, *self.upper_blocks]

  def fused(self, layers_BxTxLxD: jax.Array) -> jax.Array:
    return fuse_layers(self.layer_norms, self.fuse, layers_BxTxLxD)

  def _inputs(self, feature_BxTxD, embed_BxTxD):
    return self.mix(jnp.concatenate([self.feature_norm(feature_BxTxD), self.embed_norm(embed_BxTxD)], axis=-1))

  def __call__(self, feature_BxTxD, embed_BxTxD, positions_BxT, cache: KVCache, tree=None):
    """One step with the draft cache: block outputs [B, T, D] (the next step's feature) and the cache. With `tree`
    (a TreeLayout) positions_BxT are a token tree's slots: RoPE by depth, attention by ancestry."""
    rope_positions_BxT = positions_BxT if tree is None else tree.rope_positions(positions_BxT)
    cos, sin = self.family.rope_tables(self.layer_config, rope_positions_BxT)
    x_BxTxD = self._inputs(feature_BxTxD, embed_BxTxD)
    for index, block in enumerate(self.blocks):
      x_BxTxD, cache = block(x_BxTxD, cos, sin, positions_BxT, cache, index, tree)
    return x_BxTxD, cache

  def unrolled(self, feature_BxTxD, embeds_SxBxTxD) -> list[jax.Array]:
    """Training-time test: S draft steps for every chain p at once, exactly as `propose` runs them.

    Chain p starts at position p from the target feature of p - 1 (feature_BxTxD, already shifted) and token p;
    its step s sits at position p + s - 1, takes its step s - 1 output and token embeds_SxBxTxD[s - 1][:, p],
    and attends to step-1 entries at positions <= p plus its own steps 2..s, in every layer. Returns each step's
    outputs."""
    batch, t_len, _ = feature_BxTxD.shape
    blocks = self.blocks
    feature, outs = feature_BxTxD, []
    keys, values = [[] for _ in blocks], [[] for _ in blocks]   # per layer, per step
    for step, embed_BxTxD in enumerate(embeds_SxBxTxD):
      positions = jnp.broadcast_to(jnp.arange(t_len, dtype=jnp.int32) + step, (batch, t_len))
      cos, sin = self.family.rope_tables(self.layer_config, positions)
      feature = self._inputs(feature, embed_BxTxD)
      for index, block in enumerate(blocks):
        feature = self.family.chain_block(block, feature, cos, sin, keys[index], values[index])
      outs.append(feature)
    return outs


class FeatureHead(TrainedHead):
  """The drafter. Draft state: the head's KV cache, the fused target features by position (valid below
  seq_len - 1), and `filled_B`, the positions below which the cache holds entries computed from target features."""

  net_class, config_class = FeatureNet, FeatureHeadConfig
  branches = True

  @property
  def feature_layers(self) -> tuple[int, ...]:
    return self.config.feature_layers

  @classmethod
  def initial_net(cls, target: Model, config: FeatureHeadConfig, seed: int) -> nnx.State:
    """The per-layer norms start at `start_layer_norms`."""
    net = FeatureNet(config, nnx.Rngs(seed))
    start_layer_norms(net.layer_norms, target, config.feature_layers)
    return nnx.split(net)[1]

  def init(self, params, tokens_BxS, prompt_len_B, prompt_bucket, features=None):
    net = self.module(params["net"])
    batch, size = tokens_BxS.shape
    fused_BxTxD = net.fused(features.layers_BxTxLxD)
    feature_BxSxD = jnp.zeros((batch, size, self.config.d_model), jnp.float32).at[:, :prompt_bucket].set(fused_BxTxD)
    cache = init_cache(net.layer_config, batch, size, dtype=jnp.float32)
    shifted = jnp.pad(fused_BxTxD[:, :-1], ((0, 0), (1, 0), (0, 0)))
    positions = jnp.broadcast_to(jnp.arange(prompt_bucket, dtype=jnp.int32), (batch, prompt_bucket))
    _, cache = net(shifted, embed_tokens(params["frozen"], tokens_BxS[:, :prompt_bucket]), positions, cache)
    return {"cache": cache, "feature_BxSxD": feature_BxSxD, "draft_BxS": jnp.zeros((batch, size), jnp.int32),
            "round_len_B": (prompt_len_B + 1).astype(jnp.int32)}

  def _last_entry(self, net, frozen, state, tokens_BxS, seq_len_B):
    """The cache entry of position seq_len - 1 (the one position a round starts without: its token was sampled
    by the last verify call), from the target feature of seq_len - 2. Returns its output [B, D] and the cache."""
    rows_B1 = jnp.arange(tokens_BxS.shape[0])[:, None]
    position_B1 = (seq_len_B - 1)[:, None]
    feature = state["feature_BxSxD"][rows_B1, jnp.maximum(position_B1 - 1, 0)]
    out_Bx1xD, cache = net(feature, embed_tokens(frozen, tokens_BxS[rows_B1, position_B1]), position_B1,
                           state["cache"])
    return out_Bx1xD[:, 0], cache

  def observe(self, params, state, tokens_BxS, seq_len_B):
    _, cache = self._last_entry(self.module(params["net"]), params["frozen"], state, tokens_BxS, seq_len_B)
    return dict(state, cache=cache, round_len_B=seq_len_B.astype(jnp.int32))

  def propose(self, params, state, tokens_BxS, seq_len_B, k, sampling, keys_B):
    net, frozen = self.module(params["net"]), params["frozen"]
    out_BxD, cache = self._last_entry(net, frozen, state, tokens_BxS, seq_len_B)
    keys_KxB = jnp.moveaxis(jax.vmap(lambda key: jax.random.split(key, k))(keys_B), 1, 0)
    token_B, q_BxV = draw(frozen, net.out_norm(out_BxD), sampling, keys_KxB[0])

    def step(carry, inputs):
      cache, out_BxD, token_B = carry
      key_B, position = inputs
      out, cache = net(out_BxD[:, None], embed_tokens(frozen, token_B[:, None]), (seq_len_B + position)[:, None], cache)
      next_B, q_BxV = draw(frozen, net.out_norm(out[:, 0]), sampling, key_B)
      return (cache, out[:, 0], next_B), (next_B, q_BxV)

    _, (tokens_KxB, q_KxBxV) = jax.lax.scan(step, (cache, out_BxD, token_B),
                                            (keys_KxB[1:], jnp.arange(k - 1, dtype=jnp.int32)))
    draft_BxK = jnp.concatenate([token_B[:, None], tokens_KxB.T], axis=1)
    q_BxKxV = jnp.concatenate([q_BxV[:, None], jnp.moveaxis(q_KxBxV, 0, 1)], axis=1)
    rows_B1 = jnp.arange(draft_BxK.shape[0])[:, None]
    drafts = state["draft_BxS"].at[rows_B1, seq_len_B[:, None] + jnp.arange(k)[None, :]].set(draft_BxK, mode="drop")
    return draft_BxK, q_BxKxV, dict(state, cache=cache, draft_BxS=drafts, round_len_B=seq_len_B.astype(jnp.int32))

  def propose_tree(self, params, state, tokens_BxS, seq_len_B, tree, sampling, keys_B, vocab_size):
    """EAGLE-2 at the feature level: a node's children come from the head run on its parent's output feature and
    its own token, one head call per level with the tree's attention; `commit` later rewrites the accepted
    entries from the target's features, as after a chain."""
    net, frozen = self.module(params["net"]), params["frozen"]
    out_BxD, cache = self._last_entry(net, frozen, state, tokens_BxS, seq_len_B)

    def expand(cache, tokens_BxL, feature_BxLxD, slots_BxL, layout, depth):
      out_BxLxD, cache = net(feature_BxLxD, embed_tokens(frozen, tokens_BxL), slots_BxL, cache, tree=layout)
      return vocab_logits(frozen, net.out_norm(out_BxLxD)), out_BxLxD, cache

    draft, cache = grow(tree, expand, cache, vocab_logits(frozen, net.out_norm(out_BxD)), out_BxD, seq_len_B - 1,
                        sampling, keys_B)
    return (draft.tokens_BxN, draft.parent_BxN, draft.q_BxN1xV,
            dict(state, cache=cache, round_len_B=seq_len_B.astype(jnp.int32)))

  def commit_tree(self, params, state, path_BxN, n_accepted_B, root_slot_B, accepted_BxD):
    """The accepted path's tokens where `commit` reads a round's drafts."""
    rows_B1 = jnp.arange(accepted_BxD.shape[0])[:, None]
    slots_BxD = root_slot_B[:, None] + 1 + jnp.arange(accepted_BxD.shape[1])[None, :]
    return dict(state, draft_BxS=state["draft_BxS"].at[rows_B1, slots_BxD].set(accepted_BxD, mode="drop"))

  def commit(self, params, state, n_accepted_B, seq_len_B, features=None):
    """Stores the verified positions' fused features and recomputes the entries of the drafts from them (the
    round's draft entries came from the head's own outputs). Entries past the accepted drafts are rewritten
    before any query reads them, so any K (including the K = 0 rounds of the adaptive policy) works."""
    net = self.module(params["net"])
    fused_BxK1xD = net.fused(features.layers_BxTxLxD)
    batch, k1, _ = fused_BxK1xD.shape
    rows_B1 = jnp.arange(batch)[:, None]
    start_B1 = state["round_len_B"][:, None]
    positions_BxK1 = start_B1 - 1 + jnp.arange(k1, dtype=jnp.int32)[None, :]
    feature = state["feature_BxSxD"].at[rows_B1, positions_BxK1].set(fused_BxK1xD, mode="drop")
    cache = state["cache"]
    if k1 > 1:
      positions_BxK = positions_BxK1[:, 1:]
      drafts = state["draft_BxS"][rows_B1, jnp.minimum(positions_BxK, feature.shape[1] - 1)]
      _, cache = net(fused_BxK1xD[:, :-1], embed_tokens(params["frozen"], drafts), positions_BxK, cache)
    return dict(state, cache=cache, feature_BxSxD=feature)
