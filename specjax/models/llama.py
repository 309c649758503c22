"""Llama-family decoder in Flax NNX: RMSNorm, RoPE, grouped-query attention, SwiGLU, tied or untied head."""

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.attention import cached_attention
from specjax.cache import KVCache, attention_block
from specjax.config import ModelConfig
from specjax.kernels import dense, dense_group, plain
from specjax.models.family import ModelFamily, ShardRule
from specjax.models.rope import apply_rope, rope_tables


class RMSNorm(nnx.Module):

  def __init__(self, dim: int, eps: float, dtype):
    self.scale = nnx.Param(jnp.ones((dim,), dtype))
    self.eps = eps

  def __call__(self, x: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    scale = self.scale[...].astype(jnp.float32).reshape((1,) * (x.ndim - 1) + (-1,))
    return (normed * scale).astype(x.dtype)


class Dense(nnx.Module):
  """x @ kernel (+ bias) through `specjax.kernels.dense`; parameters named and shaped as nnx.Linear's."""

  def __init__(self, d_in: int, d_out: int, bias: bool, dtype, rngs: nnx.Rngs):
    self.kernel = nnx.Param(nnx.initializers.normal(d_in**-0.5)(rngs.params(), (d_in, d_out), dtype))
    self.bias = nnx.Param(jnp.zeros((d_out,), dtype)) if bias else None

  def __call__(self, x: jax.Array) -> jax.Array:
    return self.add_bias(dense(x, self.kernel[...]))

  def add_bias(self, y: jax.Array) -> jax.Array:
    return y if self.bias is None else y + self.bias[...].reshape((1,) * (y.ndim - 1) + (-1,))


def _linear(d_in: int, d_out: int, bias: bool, dtype, rngs: nnx.Rngs) -> Dense:
  return Dense(d_in, d_out, bias, dtype, rngs)


def dense_all(x: jax.Array, layers: list) -> list:
  """[layer(x) for layer in layers], Dense modules that read one input: one kernel call where the packed view
  fused their weights (`specjax.kernels.packed.FUSED`)."""
  if not all(isinstance(layer, Dense) for layer in layers):   # a quantized variant's own layers
    return [layer(x) for layer in layers]
  return [layer.add_bias(y) for layer, y in zip(layers, dense_group(x, [layer.kernel[...] for layer in layers]))]


class Attention(nnx.Module):

  def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
    dt, d, hd = jnp.dtype(config.dtype), config.d_model, config.head_dim_
    self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, hd
    self.q = _linear(d, config.n_heads * hd, config.qkv_bias, dt, rngs)
    self.k = _linear(d, config.n_kv_heads * hd, config.qkv_bias, dt, rngs)
    self.v = _linear(d, config.n_kv_heads * hd, config.qkv_bias, dt, rngs)
    self.o = _linear(config.n_heads * hd, d, False, dt, rngs)

  def __call__(self, x_BxTxD, cos, sin, positions_BxT, cache: KVCache, layer: int, tree=None):
    batch, t_len, _ = x_BxTxD.shape
    q, k, v = dense_all(x_BxTxD, [self.q, self.k, self.v])
    q = apply_rope(q.reshape(batch, t_len, self.n_heads, self.head_dim), cos, sin)
    k = apply_rope(k.reshape(batch, t_len, self.n_kv_heads, self.head_dim), cos, sin)
    v = v.reshape(batch, t_len, self.n_kv_heads, self.head_dim)
    cache = cache.write(layer, k, v, positions_BxT)
    block = attention_block(cache.size, t_len)
    out = cached_attention(q, cache.k, cache.v, layer, positions_BxT, block, tree)
    return self.o(out.reshape(batch, t_len, -1)), cache


class MLP(nnx.Module):

  def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
    dt, d, f = jnp.dtype(config.dtype), config.d_model, config.ffn_dim
    self.gate = _linear(d, f, False, dt, rngs)
    self.up = _linear(d, f, False, dt, rngs)
    self.down = _linear(f, d, False, dt, rngs)

  def __call__(self, x):
    gate, up = dense_all(x, [self.gate, self.up])
    return self.down(jax.nn.silu(gate) * up)


class Block(nnx.Module):
  """Pre-norm decoder layer; a variant with another norm sets `norm_class` (norm_class(dim, eps, dtype))."""

  norm_class = RMSNorm

  def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
    dt = jnp.dtype(config.dtype)
    self.attn_norm = self.norm_class(config.d_model, config.norm_eps, dt)
    self.attn = Attention(config, rngs)
    self.mlp_norm = self.norm_class(config.d_model, config.norm_eps, dt)
    self.mlp = MLP(config, rngs)

  def __call__(self, x, cos, sin, positions_BxT, cache, layer, tree=None):
    attn_out, cache = self.attn(self.attn_norm(x), cos, sin, positions_BxT, cache, layer, tree)
    x = x + attn_out
    return x + self.mlp(self.mlp_norm(x)), cache


class Llama(nnx.Module):
  """`model(tokens_BxT, positions_BxT, cache) -> (logits_BxTxV, hidden_BxTxD, cache)`.

  Each row's T tokens are written to the cache at that row's own positions and attend causally to
  every cache entry at or below their position. A variant sets `block_class` and `norm_class`.
  """

  block_class, norm_class = Block, RMSNorm

  def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
    dt = jnp.dtype(config.dtype)
    self.config = config
    self.embed = nnx.Param(jax.random.normal(rngs.params(), (config.vocab_size, config.d_model), dt) * 0.02)
    self.layers = nnx.List([self.block_class(config, rngs) for _ in range(config.n_layers)])
    self.final_norm = self.norm_class(config.d_model, config.norm_eps, dt)
    if not config.tie_embeddings:
      self.head = _linear(config.d_model, config.vocab_size, False, dt, rngs)

  def hidden_states(self, tokens_BxT, positions_BxT, cache: KVCache, collect_layers: tuple = (), tree=None):
    """Final-normed hidden states [B, T, D], the updated cache, and the residual stream after each
    layer listed in `collect_layers` (for feature-level drafters). With `tree` (a TreeLayout) the T tokens are a run
    of a token tree's consecutive slots positions_BxT: RoPE positions by depth, attention by ancestry."""
    rope_positions_BxT = positions_BxT if tree is None else tree.rope_positions(positions_BxT)
    cos, sin = rope_tables(self.config, rope_positions_BxT)
    x = self.embed_tokens(tokens_BxT)
    collected = []
    for index, block in enumerate(self.layers):
      x, cache = block(x, cos, sin, positions_BxT, cache, index, tree)
      if index in collect_layers:
        collected.append(x)
    return self.final_norm(x), cache, collected

  def embed_tokens(self, tokens_BxT) -> jax.Array:
    """[B, T, D] rows of the embedding (a float parameter, or a quantized `QDense` table)."""
    if isinstance(self.embed, nnx.Param):
      return jnp.take(plain(self.embed[...]), tokens_BxT, axis=0)
    return self.embed.rows(tokens_BxT, jnp.dtype(self.config.dtype))

  def logits(self, hidden_BxTxD) -> jax.Array:
    """Float32 logits over the vocabulary."""
    if self.config.tie_embeddings and not isinstance(self.embed, nnx.Param):
      out = self.embed(hidden_BxTxD)  # a quantized table: x @ W.T is the tied head
    elif self.config.tie_embeddings:
      out = dense(hidden_BxTxD, self.embed[...], transposed=True)
    else:
      out = self.head(hidden_BxTxD)
    return out.astype(jnp.float32)

  def __call__(self, tokens_BxT, positions_BxT, cache: KVCache):
    hidden, cache, _ = self.hidden_states(tokens_BxT, positions_BxT, cache)
    return self.logits(hidden), hidden, cache


def _scaled_queries(block: Block, h_BxTxD, cos, sin) -> jax.Array:
  """Queries grouped by kv head, [B, T, kv_heads, groups, head_dim], RoPE applied and scaled by 1/sqrt(head_dim)."""
  attn = block.attn
  batch, t_len, _ = h_BxTxD.shape
  q = attn.q(h_BxTxD).reshape(batch, t_len, attn.n_kv_heads, attn.n_heads // attn.n_kv_heads, attn.head_dim)
  return apply_rope(q, cos[:, :, None], sin[:, :, None]) * attn.head_dim**-0.5


def _after_attention(block: Block, x_BxTxD, mixed_BxTxKxGxD) -> jax.Array:
  """The residual stream after the attention output (heads mixed_BxTxKxGxD) and the MLP."""
  x = x_BxTxD + block.attn.o(mixed_BxTxKxGxD.reshape(x_BxTxD.shape[:2] + (-1,)).astype(x_BxTxD.dtype))
  return x + block.mlp(block.mlp_norm(x))


def context_kv(block: Block, x_BxTxD, cos, sin) -> tuple[jax.Array, jax.Array]:
  """The keys (RoPE applied) and values `block`'s attention makes of x_BxTxD as it is, without the block's input
  norm: a block drafter's context entries, made from the target's fused features (DFlash's k/v of target_hidden)."""
  attn = block.attn
  batch, t_len, _ = x_BxTxD.shape
  k = apply_rope(attn.k(x_BxTxD).reshape(batch, t_len, attn.n_kv_heads, attn.head_dim), cos, sin)
  return k, attn.v(x_BxTxD).reshape(batch, t_len, attn.n_kv_heads, attn.head_dim)


def chain_block(block: Block, x_BxTxD, cos, sin, keys: list, values: list) -> jax.Array:
  """A Llama block without a cache, for training. With empty `keys`: causal self-attention over the T positions
  (their keys and values are appended). Otherwise position t is chain t's next step: it attends to the first
  call's entries at positions <= t and to chain t's own entries of every later call, then appends its own."""
  t_len = x_BxTxD.shape[1]
  h = block.attn_norm(x_BxTxD)
  q = _scaled_queries(block, h, cos, sin)
  new_k, new_v = context_kv(block, h, cos, sin)
  keys.append(new_k)
  values.append(new_v)
  position_T = jnp.arange(t_len)
  context = jnp.einsum("btkgd,bskd->bkgts", q.astype(jnp.float32), keys[0].astype(jnp.float32))
  context = jnp.where((position_T[None, :] <= position_T[:, None])[None, None, None], context, -jnp.inf)
  own = [jnp.einsum("btkgd,btkd->bkgt", q, k).astype(jnp.float32)[..., None] for k in keys[1:]]
  weights = jax.nn.softmax(jnp.concatenate([context] + own, axis=-1), axis=-1)
  mixed = jnp.einsum("bkgts,bskd->btkgd", weights[..., :t_len], values[0].astype(jnp.float32))
  for i, v in enumerate(values[1:]):
    mixed = mixed + jnp.einsum("bkgt,btkd->btkgd", weights[..., t_len + i], v.astype(jnp.float32))
  return _after_attention(block, x_BxTxD, mixed)


def masked_block(block: Block, x_BxTxD, cos, sin, keys_BxSxKxD, values_BxSxKxD, visible_BxTxST) -> jax.Array:
  """A Llama block without a cache whose T queries attend to S extra entries (a block drafter's context) and to
  the T positions' own entries, where visible_BxTx(S+T) allows (training of block drafters)."""
  h = block.attn_norm(x_BxTxD)
  q = _scaled_queries(block, h, cos, sin)
  own_k, own_v = context_kv(block, h, cos, sin)
  keys = jnp.concatenate([keys_BxSxKxD, own_k], axis=1).astype(jnp.float32)
  values = jnp.concatenate([values_BxSxKxD, own_v], axis=1).astype(jnp.float32)
  scores = jnp.einsum("btkgd,bskd->bkgts", q.astype(jnp.float32), keys)
  weights = jax.nn.softmax(jnp.where(visible_BxTxST[:, None, None], scores, -1e30), axis=-1)
  return _after_attention(block, x_BxTxD, jnp.einsum("bkgts,bskd->btkgd", weights, values))


def param_count(config: ModelConfig) -> int:
  d, f, hd = config.d_model, config.ffn_dim, config.head_dim_
  attn = d * hd * (config.n_heads * 2 + config.n_kv_heads * 2)
  if config.qkv_bias:
    attn += hd * (config.n_heads + 2 * config.n_kv_heads)
  per_layer = attn + 3 * d * f + 2 * d
  head = 0 if config.tie_embeddings else config.vocab_size * d
  return config.n_layers * per_layer + config.vocab_size * d + head + d


# Megatron-style tensor parallelism: q/k/v and gate/up split by output columns, o and down by input rows (one
# all-reduce each), embedding and head by vocabulary; heads stay whole. A quantized weight (`QDense`: q, scale,
# minimum) is W [N, K], the fp32 kernel [K, N] transposed: it splits rows where the kernel splits columns, and its
# input columns (so its blocks) where the kernel splits rows.
_QUANTIZED = r"\.(q|scale|minimum)$"
SHARDING = (
    ShardRule(r"embed$", 0, "vocab_size"),
    ShardRule(r"head\.kernel$", -1, "vocab_size"),
    ShardRule(r"attn\.q\.(kernel|bias)$", -1, "n_heads"),
    ShardRule(r"attn\.[kv]\.(kernel|bias)$", -1, "n_kv_heads"),
    ShardRule(r"attn\.o\.kernel$", 0, "n_heads"),
    ShardRule(r"mlp\.(gate|up)\.kernel$", -1, "ffn_dim"),
    ShardRule(r"mlp\.down\.kernel$", 0, "ffn_dim"),
    ShardRule(r"(embed|head)" + _QUANTIZED, 0, "vocab_size"),
    ShardRule(r"attn\.q" + _QUANTIZED, 0, "n_heads"),
    ShardRule(r"attn\.[kv]" + _QUANTIZED, 0, "n_kv_heads"),
    ShardRule(r"attn\.o" + _QUANTIZED, -1, "n_heads"),
    ShardRule(r"mlp\.(gate|up)" + _QUANTIZED, 0, "ffn_dim"),
    ShardRule(r"mlp\.down" + _QUANTIZED, -1, "ffn_dim"),
)

LLAMA = ModelFamily(name="llama", module=Llama, block=Block, norm=RMSNorm, rope_tables=rope_tables,
                    chain_block=chain_block, sharding=SHARDING, param_count=param_count, context_kv=context_kv,
                    masked_block=masked_block)
