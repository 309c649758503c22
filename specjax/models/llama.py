"""Llama-family decoder in Flax NNX: RMSNorm, RoPE, grouped-query attention, SwiGLU, tied or untied head."""

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.attention import cached_attention
from specjax.cache import KVCache, attention_block
from specjax.config import ModelConfig
from specjax.kernels import dense
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
    y = dense(x, self.kernel[...])
    return y if self.bias is None else y + self.bias[...].reshape((1,) * (y.ndim - 1) + (-1,))


def _linear(d_in: int, d_out: int, bias: bool, dtype, rngs: nnx.Rngs) -> Dense:
  return Dense(d_in, d_out, bias, dtype, rngs)


class Attention(nnx.Module):

  def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
    dt, d, hd = jnp.dtype(config.dtype), config.d_model, config.head_dim_
    self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, hd
    self.q = _linear(d, config.n_heads * hd, config.qkv_bias, dt, rngs)
    self.k = _linear(d, config.n_kv_heads * hd, config.qkv_bias, dt, rngs)
    self.v = _linear(d, config.n_kv_heads * hd, config.qkv_bias, dt, rngs)
    self.o = _linear(config.n_heads * hd, d, False, dt, rngs)

  def __call__(self, x_BxTxD, cos, sin, positions_BxT, cache: KVCache, layer: int):
    batch, t_len, _ = x_BxTxD.shape
    q = apply_rope(self.q(x_BxTxD).reshape(batch, t_len, self.n_heads, self.head_dim), cos, sin)
    k = apply_rope(self.k(x_BxTxD).reshape(batch, t_len, self.n_kv_heads, self.head_dim), cos, sin)
    v = self.v(x_BxTxD).reshape(batch, t_len, self.n_kv_heads, self.head_dim)
    cache = cache.write(layer, k, v, positions_BxT)
    block = attention_block(cache.size, t_len)
    out = cached_attention(q, cache.k, cache.v, layer, positions_BxT, block)
    return self.o(out.reshape(batch, t_len, -1)), cache


class MLP(nnx.Module):

  def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
    dt, d, f = jnp.dtype(config.dtype), config.d_model, config.ffn_dim
    self.gate = _linear(d, f, False, dt, rngs)
    self.up = _linear(d, f, False, dt, rngs)
    self.down = _linear(f, d, False, dt, rngs)

  def __call__(self, x):
    return self.down(jax.nn.silu(self.gate(x)) * self.up(x))


class Block(nnx.Module):

  def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
    dt = jnp.dtype(config.dtype)
    self.attn_norm = RMSNorm(config.d_model, config.norm_eps, dt)
    self.attn = Attention(config, rngs)
    self.mlp_norm = RMSNorm(config.d_model, config.norm_eps, dt)
    self.mlp = MLP(config, rngs)

  def __call__(self, x, cos, sin, positions_BxT, cache, layer):
    attn_out, cache = self.attn(self.attn_norm(x), cos, sin, positions_BxT, cache, layer)
    x = x + attn_out
    return x + self.mlp(self.mlp_norm(x)), cache


class Llama(nnx.Module):
  """`model(tokens_BxT, positions_BxT, cache) -> (logits_BxTxV, hidden_BxTxD, cache)`.

  Each row's T tokens are written to the cache at that row's own positions and attend causally to
  every cache entry at or below their position.
  """

  def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
    dt = jnp.dtype(config.dtype)
    self.config = config
    self.embed = nnx.Param(jax.random.normal(rngs.params(), (config.vocab_size, config.d_model), dt) * 0.02)
    self.layers = nnx.List([Block(config, rngs) for _ in range(config.n_layers)])
    self.final_norm = RMSNorm(config.d_model, config.norm_eps, dt)
    if not config.tie_embeddings:
      self.head = _linear(config.d_model, config.vocab_size, False, dt, rngs)

  def hidden_states(self, tokens_BxT, positions_BxT, cache: KVCache, collect_layers: tuple = ()):
    """Final-normed hidden states [B, T, D], the updated cache, and the residual stream after each
    layer listed in `collect_layers` (for feature-level drafters)."""
    cos, sin = rope_tables(self.config, positions_BxT)
    x = jnp.take(self.embed[...], tokens_BxT, axis=0)
    collected = []
    for index, block in enumerate(self.layers):
      x, cache = block(x, cos, sin, positions_BxT, cache, index)
      if index in collect_layers:
        collected.append(x)
    return self.final_norm(x), cache, collected

  def logits(self, hidden_BxTxD) -> jax.Array:
    """Float32 logits over the vocabulary."""
    if self.config.tie_embeddings:
      out = dense(hidden_BxTxD, self.embed[...], transposed=True)
    else:
      out = self.head(hidden_BxTxD)
    return out.astype(jnp.float32)

  def __call__(self, tokens_BxT, positions_BxT, cache: KVCache):
    hidden, cache, _ = self.hidden_states(tokens_BxT, positions_BxT, cache)
    return self.logits(hidden), hidden, cache
