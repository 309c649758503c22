"""KV cache as an explicit pytree with per-row lengths; rollback is setting `lengths`."""

import flax.struct
import jax
import jax.numpy as jnp

from specjax.config import ModelConfig

# Attention walks the cache in blocks of this many positions, so cache sizes are multiples of it.
CACHE_BLOCK = 128
# On GPUs and TPUs each block is a loop iteration, which costs launches and, on a GPU, a device-to-host copy of the
# loop's condition (about 27 us a block on an H200, docs/results.md section 33, the time to read 100 MB of cache):
# attention there takes blocks up to this many scores per kv head and row.
ACCELERATOR_SCORES = 1 << 21
# KVCache.write writes rows one by one up to this batch size, with one scatter beyond.
ROW_WRITES = 4


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
    """Stores T new keys and values per row at that row's own positions: consecutive ones, from positions_BxT[:, 0]
    (what prefill, verification and drafting write), within the cache. Up to ROW_WRITES rows, one in-place
    dynamic-update-slice per row: XLA:CPU runs a scatter of T > 1 positions several times slower (2-6 ms of a
    SmolLM2 step at T = 2-5, batch 1); more rows, one scatter (a loop over rows would grow the program)."""
    if self.batch > ROW_WRITES:
      batch_B1 = jnp.arange(self.batch)[:, None]
      k = self.k.at[layer, batch_B1, positions_BxT].set(k_BxTxKxD.astype(self.k.dtype), mode="drop")
      v = self.v.at[layer, batch_B1, positions_BxT].set(v_BxTxKxD.astype(self.v.dtype), mode="drop")
      return self.replace(k=k, v=v)
    k, v = self.k, self.v
    for row in range(self.batch):
      start = (layer, row, positions_BxT[row, 0], 0, 0)
      k = jax.lax.dynamic_update_slice(k, k_BxTxKxD[row:row + 1][None].astype(k.dtype), start)
      v = jax.lax.dynamic_update_slice(v, v_BxTxKxD[row:row + 1][None].astype(v.dtype), start)
    return self.replace(k=k, v=v)

  def with_lengths(self, lengths_B: jax.Array) -> "KVCache":
    return self.replace(lengths=lengths_B.astype(jnp.int32))


def round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


def cache_size(positions: int) -> int:
  """Positions a cache allocates: a power of two up to CACHE_BLOCK, then multiples of it.

  Every attention block size (a power of two <= CACHE_BLOCK and <= the size) divides it."""
  if positions <= CACHE_BLOCK:
    return max(16, 1 << (positions - 1).bit_length())
  return round_up(positions, CACHE_BLOCK)


def attention_block(size: int, query_len: int) -> int:
  """Cache positions attention reads per step: short query blocks read CACHE_BLOCK positions at a
  time; long ones (prefill) no more than their own length, so a short prompt reads no padding."""
  block = min(CACHE_BLOCK, size)
  if query_len >= 16:
    block = min(block, 1 << (query_len.bit_length() - 1))
  return block


def accelerator_attention_block(size: int, query_rows: int) -> int:
  """Cache positions per attention block on GPUs and TPUs: the fewest blocks that divide `size` and keep
  query_rows x block <= ACCELERATOR_SCORES (the whole cache in one block for a decode step or a verification)."""
  blocks = max(1, -(-size * query_rows // ACCELERATOR_SCORES))
  while size % blocks:
    blocks += 1
  return size // blocks


def cache_layout(config: ModelConfig) -> tuple:
  """What a cache's shape and dtype take from its model: models of one layout can draft in one cache."""
  return config.n_layers, config.n_kv_heads, config.head_dim_, jnp.dtype(config.dtype)


def init_cache(config: ModelConfig, batch: int, size: int, dtype=None) -> KVCache:
  """An empty cache with room for at least `size` positions (see `cache_size`)."""
  size = cache_size(size)
  shape = (config.n_layers, batch, size, config.n_kv_heads, config.head_dim_)
  dtype = dtype or jnp.dtype(config.dtype)
  return KVCache(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype), lengths=jnp.zeros((batch,), jnp.int32))
