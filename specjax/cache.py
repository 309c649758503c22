"""KV cache as an explicit pytree with per-row lengths; rollback is setting `lengths`."""

import flax.struct
import jax
import jax.numpy as jnp

from specjax.config import ModelConfig

# Attention walks the cache in blocks of this many positions, so cache sizes are multiples of it.
CACHE_BLOCK = 128


@flax.struct.dataclass
class KVCache:
  """k, v: [layers, B, S, kv_heads, head_dim]; lengths[B]: valid prefix of each row."""

  k: jax.Array
  v: jax.Array
  lengths: jax.Array

  @property
  def size(self) -> int:
    return self.k.shape[2]

  @property
  def batch(self) -> int:
    return self.k.shape[1]

  def write(self, layer: int, k_BxTxKxD: jax.Array, v_BxTxKxD: jax.Array, positions_BxT: jax.Array) -> "KVCache":
    """Stores T new keys and values per row at that row's own positions (out-of-range ones are dropped)."""
    batch_B1 = jnp.arange(self.batch)[:, None]
    k = self.k.at[layer, batch_B1, positions_BxT].set(k_BxTxKxD.astype(self.k.dtype), mode="drop")
    v = self.v.at[layer, batch_B1, positions_BxT].set(v_BxTxKxD.astype(self.v.dtype), mode="drop")
    return self.replace(k=k, v=v)

  def with_lengths(self, lengths_B: jax.Array) -> "KVCache":
    return self.replace(lengths=lengths_B.astype(jnp.int32))


def round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


def init_cache(config: ModelConfig, batch: int, size: int, dtype=None) -> KVCache:
  """An empty cache of `size` positions (rounded up to the attention block)."""
  size = round_up(size, CACHE_BLOCK)
  shape = (config.n_layers, batch, size, config.n_kv_heads, config.head_dim_)
  dtype = dtype or jnp.dtype(config.dtype)
  return KVCache(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype), lengths=jnp.zeros((batch,), jnp.int32))
