"""Rotary position embedding (half-split layout, as Hugging Face Llama), with optional Llama-3 scaling."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from specjax.config import ModelConfig


def inverse_frequencies(config: ModelConfig) -> np.ndarray:
  """Per-pair rotation frequencies [head_dim // 2], computed on the host once."""
  dim = config.head_dim_
  inv_freq = 1.0 / (config.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
  if config.rope_scaling:
    factor, low_factor, high_factor, original_len = config.rope_scaling
    low_wavelen = original_len / low_factor
    high_wavelen = original_len / high_factor
    wavelen = 2 * math.pi / inv_freq
    smooth = (original_len / wavelen - low_factor) / (high_factor - low_factor)
    scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    mid = (wavelen <= low_wavelen) & (wavelen >= high_wavelen)
    inv_freq = np.where(mid, (1 - smooth) * inv_freq / factor + smooth * inv_freq, scaled)
  return inv_freq.astype(np.float32)


def rope_tables(config: ModelConfig, positions_BxT: jax.Array) -> tuple[jax.Array, jax.Array]:
  """cos and sin, each [B, T, 1, head_dim // 2] in float32."""
  angles = positions_BxT.astype(jnp.float32)[..., None] * jnp.asarray(inverse_frequencies(config))[None, None, :]
  return jnp.cos(angles)[:, :, None, :], jnp.sin(angles)[:, :, None, :]


def apply_rope(x_BxTxHxD: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
  half = x_BxTxHxD.shape[-1] // 2
  x = x_BxTxHxD.astype(jnp.float32)
  x1, x2 = x[..., :half], x[..., half:]
  rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return rotated.astype(x_BxTxHxD.dtype)
