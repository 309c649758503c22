"""Which sibling rank each round accepted: per visited context (the root, then each accepted node) its number of
children and the rank of the child that was accepted, the record that per-rank acceptance (Sequoia's positional
acceptance, `stats.acceptance_by_rank`) and the tree theory (`benchmark.theory.tree_expected_tokens`) read."""

import jax.numpy as jnp


def path_ranks(parent_BxN, path_BxN, n_accepted_B, max_depth: int):
  """(rank_BxD1, children_BxD1) with D1 = max_depth + 1: context d is the root (d = 0) or the accepted node at depth
  d. children: its children in the tree (0 where the path did not reach it); rank: its accepted child's rank among
  its siblings in node order (siblings are proposed and kept in rank order), -1 where none was accepted."""
  batch, n = parent_BxN.shape
  index_N = jnp.arange(n, dtype=jnp.int32)
  same_parent_BxNxN = parent_BxN[:, :, None] == parent_BxN[:, None, :]
  rank_BxN = jnp.sum(same_parent_BxNxN & (index_N[None, None, :] < index_N[None, :, None]), axis=2)
  children_BxN1 = jnp.sum(parent_BxN[:, None, :] == jnp.arange(-1, n, dtype=jnp.int32)[None, :, None], axis=2)
  depth_D1 = jnp.arange(max_depth + 1, dtype=jnp.int32)
  path_BxD = path_BxN[:, :max_depth]
  context_BxD1 = jnp.concatenate([jnp.full((batch, 1), -1, jnp.int32), path_BxD], axis=1)
  reached_BxD1 = depth_D1[None, :] <= n_accepted_B[:, None]
  children_BxD1 = jnp.where(reached_BxD1, jnp.take_along_axis(children_BxN1, jnp.maximum(context_BxD1 + 1, 0), 1), 0)
  accepted_BxD = jnp.arange(max_depth, dtype=jnp.int32)[None, :] < n_accepted_B[:, None]
  rank_BxD = jnp.where(accepted_BxD, jnp.take_along_axis(rank_BxN, jnp.maximum(path_BxD, 0), 1), -1)
  rank_BxD1 = jnp.concatenate([rank_BxD, jnp.full((batch, 1), -1, jnp.int32)], axis=1)
  return rank_BxD1.astype(jnp.int32), children_BxD1.astype(jnp.int32)
