"""Exact acceptance of a token tree: walk from the root, one rule per way the siblings were drawn.

A tree is, per row, N node tokens in topological order (a node's parent has a smaller index; -1 is the root, the
last committed token; a parent below -1 marks a padding node, never visited) and the distributions at every
context: index 0 is the root's, index i + 1 the context after node i. p is the target's (from its one verification
call), q the draft's that the children were drawn from.

- branching="top_k" (children chosen deterministically, e.g. the draft's top k): the target-only recursive rule.
  The residual r starts at p; each child x in order is accepted with probability r(x) / sum(r), else r(x) = 0.
- branching="sample" (children drawn without replacement from q): recursive rejection sampling (RSD / Sequoia).
  With r = p and s = q, each child x is accepted with probability min(1, r(x) / s(x)); on rejection
  r = norm(max(r - s, 0)) and s = norm(s with x removed).
- greedy (one-hot p): follow the target's argmax down the tree.

After an accepted child the walk moves into it (its own children, p and q); when no child of the current node is
accepted, the correction (or, at a leaf, the bonus) is drawn from what is left of r. Each rule is exact only for
children drawn its way, with one exception: the target-only rule never reads q (each visit asks whether the
target's own draw is this child), so it is exact for any children, sampled ones included, where it accepts less
than recursive rejection sampling. The sampled rule on deterministic children is not exact. A chain (every node
one child) under "sample" is the chain's modified rejection sampling.
"""

import jax
import jax.numpy as jnp

from specjax.sampling import greedy_tokens, sample

BRANCHINGS = ("top_k", "sample")


def _normalized(x_V, fallback_V):
  mass = x_V.sum()
  return jnp.where(mass > 0, x_V / jnp.where(mass > 0, mass, 1.0), fallback_V)


def _accept_row_greedy(target_N1, tokens_N, parent_N):
  """Greedy: a node is accepted when it is a child of the current node and the target's argmax there; token ids
  only, no distribution carried through the walk."""
  def visit(i, carry):
    current, path_N, depth = carry
    accepted = (parent_N[i] == current) & (tokens_N[i] == target_N1[current + 1])
    path_N = jnp.where(accepted, path_N.at[depth].set(i), path_N)
    return jnp.where(accepted, i, current), path_N, depth + accepted.astype(jnp.int32)

  n = tokens_N.shape[0]
  current, path_N, depth = jax.lax.fori_loop(0, n, visit, (jnp.int32(-1), jnp.full((n,), -1, jnp.int32),
                                                            jnp.int32(0)))
  return path_N, depth, target_N1[current + 1]


def _accept_row(p_N1xV, q_N1xV, tokens_N, parent_N, key, branching: str):
  n = tokens_N.shape[0]
  node_key, final_key = jax.random.split(key)
  u_N = jax.random.uniform(node_key, (n,))

  def visit(i, carry):
    current, r_V, s_V, path_N, depth = carry
    x = tokens_N[i]
    is_child = parent_N[i] == current
    p_here_V = p_N1xV[current + 1]
    if branching == "top_k":
      ok = u_N[i] * r_V.sum() < r_V[x]
      r_rejected, s_rejected = r_V.at[x].set(0.0), s_V
    else:
      r_norm, s_norm = _normalized(r_V, p_here_V), _normalized(s_V, s_V)
      is_child = is_child & (s_norm[x] > 0)  # q could not have drawn x (its support ran out): not a proposal
      ok = u_N[i] * s_norm[x] < r_norm[x]
      r_rejected = _normalized(jnp.maximum(r_norm - s_norm, 0.0), r_norm)
      s_rejected = s_norm.at[x].set(0.0)
    accepted, rejected = is_child & ok, is_child & ~ok
    r_V = jnp.where(accepted, p_N1xV[i + 1], jnp.where(rejected, r_rejected, r_V))
    s_V = jnp.where(accepted, q_N1xV[i + 1], jnp.where(rejected, s_rejected, s_V))
    path_N = jnp.where(accepted, path_N.at[depth].set(i), path_N)
    return jnp.where(accepted, i, current), r_V, s_V, path_N, depth + accepted.astype(jnp.int32)

  start = (jnp.int32(-1), p_N1xV[0], q_N1xV[0], jnp.full((n,), -1, jnp.int32), jnp.int32(0))
  current, r_V, _, path_N, depth = jax.lax.fori_loop(0, n, visit, start)
  p_here_V = p_N1xV[current + 1]
  return path_N, depth, sample(final_key, _normalized(r_V, p_here_V)).astype(jnp.int32)


def accept_tree(p_BxN1xV: jax.Array, q_BxN1xV: jax.Array, tokens_BxN: jax.Array, parent_BxN: jax.Array,
                keys_B: jax.Array, *, branching: str, greedy: bool = False):
  """(path_BxN, n_accepted_B, next_token_B): the accepted nodes root first (-1 past n_accepted), their count, and
  the correction or bonus token after them. q is read only by branching="sample"; greedy (static) needs one-hot
  p and follows its argmax whatever the branching."""
  if branching not in BRANCHINGS:
    raise ValueError(f"unknown branching {branching!r}; use one of {list(BRANCHINGS)}")
  n = tokens_BxN.shape[1]
  if p_BxN1xV.shape[1] != n + 1 or q_BxN1xV.shape[1] != n + 1 or parent_BxN.shape != tokens_BxN.shape:
    raise ValueError(f"a tree of {n} nodes needs p and q at {n + 1} contexts (root first) and one parent per node; "
                     f"got p {p_BxN1xV.shape}, q {q_BxN1xV.shape}, parents {parent_BxN.shape}")
  if greedy:
    return accept_tree_greedy(greedy_tokens(p_BxN1xV), tokens_BxN, parent_BxN)
  tokens_BxN, parent_BxN = tokens_BxN.astype(jnp.int32), parent_BxN.astype(jnp.int32)
  return jax.vmap(lambda p, q, t, a, k: _accept_row(p, q, t, a, k, branching))(p_BxN1xV, q_BxN1xV, tokens_BxN,
                                                                                parent_BxN, keys_B)


def accept_tree_greedy(target_BxN1: jax.Array, tokens_BxN: jax.Array, parent_BxN: jax.Array):
  """Greedy tree acceptance from token ids: `accept_tree`'s (path_BxN, n_accepted_B, next_token_B), following the
  target's argmax at each context (target_BxN1: the root's, then each node's)."""
  if target_BxN1.shape[1] != tokens_BxN.shape[1] + 1 or parent_BxN.shape != tokens_BxN.shape:
    raise ValueError(f"a tree of {tokens_BxN.shape[1]} nodes needs the target's tokens at {tokens_BxN.shape[1] + 1} "
                     f"contexts (root first) and one parent per node; got {target_BxN1.shape}, parents "
                     f"{parent_BxN.shape}")
  return jax.vmap(_accept_row_greedy)(target_BxN1.astype(jnp.int32), tokens_BxN.astype(jnp.int32),
                                      parent_BxN.astype(jnp.int32))
