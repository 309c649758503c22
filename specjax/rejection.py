"""Modified rejection sampling (Chen et al. 2023; Leviathan et al. 2023) over K drafted tokens.

Accept draft d_i with probability min(1, p(d_i) / q(d_i)), left to right. At the first rejection,
emit a correction drawn from norm(max(0, p - q)); if all K pass, emit a bonus token drawn from p at
position K+1. The emitted tokens are distributed exactly as the target's. With greedy (one-hot) p and
q this is greedy verification: accept while the draft equals the target's argmax, then emit the argmax.
"""

import jax
import jax.numpy as jnp

from specjax.sampling import greedy_tokens, sample


def accept(p_BxK1xV: jax.Array, q_BxKxV: jax.Array, draft_BxK: jax.Array, keys_B: jax.Array, *,
           greedy: bool = False):
  """Returns (n_accepted_B in [0, K], next_token_B): the correction or bonus token after the accepted run.

  greedy (static): p is one-hot, so this is `accept_greedy` at p's argmax (the general path's result, without a
  draw from a vocabulary-sized distribution per row)."""
  if greedy:
    return accept_greedy(greedy_tokens(p_BxK1xV), draft_BxK)
  batch, k = draft_BxK.shape
  accept_keys, residual_keys = jnp.moveaxis(jax.vmap(lambda key: jax.random.split(key, 2))(keys_B), 1, 0)
  p_draft_BxK = jnp.take_along_axis(p_BxK1xV[:, :k], draft_BxK[..., None], axis=-1)[..., 0]
  q_draft_BxK = jnp.take_along_axis(q_BxKxV, draft_BxK[..., None], axis=-1)[..., 0]
  u_BxK = jax.vmap(lambda key: jax.random.uniform(key, (k,)))(accept_keys)
  # u < p/q without dividing: accepts with probability min(1, p/q); never accepts p == 0.
  accepted_BxK = u_BxK * q_draft_BxK < p_draft_BxK
  n_accepted_B = jnp.sum(jnp.cumprod(accepted_BxK.astype(jnp.int32), axis=1), axis=1)
  # Position K has no draft: q = 0 there, so the "residual" is p itself (the bonus token).
  q_padded = jnp.concatenate([q_BxKxV, jnp.zeros_like(p_BxK1xV[:, :1])], axis=1)
  rows = jnp.arange(batch)
  p_at_B = p_BxK1xV[rows, n_accepted_B]
  residual_BxV = jnp.maximum(p_at_B - q_padded[rows, n_accepted_B], 0.0)
  mass_B1 = residual_BxV.sum(axis=-1, keepdims=True)
  # mass is 0 only when p == q (where rejection has probability 0): fall back to p.
  residual_BxV = jnp.where(mass_B1 > 0, residual_BxV / jnp.where(mass_B1 > 0, mass_B1, 1.0), p_at_B)
  next_token_B = jax.vmap(sample)(residual_keys, residual_BxV)
  return n_accepted_B.astype(jnp.int32), next_token_B


def accept_greedy(target_BxK1: jax.Array, draft_BxK: jax.Array):
  """Greedy verification from token ids: (n_accepted_B, next_token_B), the drafts accepted while each equals the
  target's argmax before it (target_BxK1, at the K + 1 positions), then the target's argmax after them."""
  k = draft_BxK.shape[1]
  matches_BxK = (draft_BxK.astype(jnp.int32) == target_BxK1[:, :k]).astype(jnp.int32)
  n_accepted_B = jnp.sum(jnp.cumprod(matches_BxK, axis=1), axis=1).astype(jnp.int32)
  return n_accepted_B, jnp.take_along_axis(target_BxK1, n_accepted_B[:, None], axis=1)[:, 0].astype(jnp.int32)
