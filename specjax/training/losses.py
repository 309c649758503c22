"""Distillation losses: KL(target || draft) per position, the cross-entropy with the target's argmax and the feature
regression, averaged over a mask."""

import jax
import jax.numpy as jnp


def masked_mean(values_BxT: jax.Array, mask_BxT: jax.Array) -> jax.Array:
  mask = mask_BxT.astype(jnp.float32)
  return jnp.sum(values_BxT * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def kl_divergence(target_logits_BxTxV: jax.Array, draft_logits_BxTxV: jax.Array) -> jax.Array:
  """KL(p || q) per position, p and q the softmax of the logits (temperature 1), [B, T]."""
  log_p = jax.nn.log_softmax(target_logits_BxTxV.astype(jnp.float32), axis=-1)
  log_q = jax.nn.log_softmax(draft_logits_BxTxV.astype(jnp.float32), axis=-1)
  return jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)


def top1_agreement(target_logits_BxTxV: jax.Array, draft_logits_BxTxV: jax.Array) -> jax.Array:
  """1 where the draft's argmax is the target's (greedy acceptance of that one token), [B, T]."""
  return (jnp.argmax(target_logits_BxTxV, -1) == jnp.argmax(draft_logits_BxTxV, -1)).astype(jnp.float32)


def cross_entropy(draft_logits_BxTxV: jax.Array, label_BxT: jax.Array) -> jax.Array:
  """-log q(label) per position, [B, T] (labels index the draft's logits)."""
  log_q = jax.nn.log_softmax(draft_logits_BxTxV.astype(jnp.float32), axis=-1)
  return -jnp.take_along_axis(log_q, label_BxT[..., None], axis=-1)[..., 0]


def argmax_cross_entropy(target_logits_BxTxV: jax.Array, draft_logits_BxTxV: jax.Array) -> jax.Array:
  """-log q(argmax p) per position, [B, T]: the cross-entropy with the target's greedy token, the smooth surrogate of
  top-1 agreement (greedy verification accepts exactly that token)."""
  return cross_entropy(draft_logits_BxTxV, jnp.argmax(target_logits_BxTxV, -1))


def feature_regression(predicted_BxTxD: jax.Array, target_BxTxD: jax.Array) -> jax.Array:
  """Smooth-L1 (Huber, delta 1) per position, mean over the feature dimension, [B, T]."""
  diff = jnp.abs(predicted_BxTxD.astype(jnp.float32) - target_BxTxD.astype(jnp.float32))
  return jnp.mean(jnp.where(diff < 1.0, 0.5 * diff * diff, diff - 0.5), axis=-1)


def shift_left(x_BxT: jax.Array, n: int, fill=0) -> jax.Array:
  """x[:, t + n] at t (fill past the end): the value n positions ahead."""
  if n == 0:
    return x_BxT
  pad = [(0, 0), (0, n)] + [(0, 0)] * (x_BxT.ndim - 2)
  return jnp.pad(x_BxT[:, n:], pad, constant_values=fill)
