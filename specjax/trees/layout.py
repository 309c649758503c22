"""A token tree in one target call: where its entries go in the cache, what each sees, and how the accepted path
is moved back into consecutive positions.

The call scores T = N + 1 tokens per row, the root (the last committed token) then the N nodes, in consecutive
cache slots from the root's slot `base`. Node i sits at RoPE position base + its depth and attends to the committed
prefix (slots < base) and to the slots of its ancestors and itself (`ancestors_BxTxT`). A call may score any run of
the tree's slots (a drafter scores one level at a time; the ancestors' entries are then already in the cache): a
query's row of the layout is its slot minus the root's. After acceptance
`compact_path` copies the accepted nodes' keys and values to slots base + 1, base + 2, ... so that the cache is
again the cache of the chain of committed tokens.
"""

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from specjax.cache import KVCache


@flax.struct.dataclass
class TreeLayout:
  """root_slot_B: the root's cache slot per row; depth_BxT: each token's depth below the root (0 for the root);
  ancestors_BxTxT[b, t, s]: token s is token t or one of its ancestors (T = N + 1, root first)."""

  root_slot_B: jax.Array
  depth_BxT: jax.Array
  ancestors_BxTxT: jax.Array

  def rope_positions(self, slots_BxT):
    """Positions of the tokens in these slots: the root's position plus their depth."""
    return self.root_slot_B[:, None] + jnp.take_along_axis(self.depth_BxT, slots_BxT - self.root_slot_B[:, None],
                                                           axis=1)


def tree_layout(parent_BxN, root_slot_B) -> TreeLayout:
  """The layout of [root] + N nodes from each node's parent (-1: the root; below -1: padding, seen as a child of
  the root), the root at root_slot_B. Parents come before their children; a concrete parent array is checked."""
  if not isinstance(parent_BxN, jax.core.Tracer):
    concrete = np.asarray(parent_BxN)
    if concrete.ndim != 2:
      raise ValueError(f"parents must be [batch, nodes], got shape {concrete.shape}")
    later = concrete >= np.arange(concrete.shape[1])[None, :]
    if later.any():
      row, node = map(int, np.argwhere(later)[0])
      raise ValueError(f"node {node} of row {row} has parent {int(concrete[row, node])}: a node's parent must be "
                       "an earlier node (or -1, the root)")
  parent_BxN = jnp.maximum(jnp.asarray(parent_BxN, jnp.int32), -1)
  batch, n = parent_BxN.shape
  rows_B = jnp.arange(batch)
  depth_BxT = jnp.zeros((batch, n + 1), jnp.int32)
  ancestors_BxTxT = jnp.broadcast_to(jnp.eye(n + 1, dtype=bool), (batch, n + 1, n + 1))
  for node in range(n):
    parent_slot_B = parent_BxN[:, node] + 1
    depth_BxT = depth_BxT.at[:, node + 1].set(depth_BxT[rows_B, parent_slot_B] + 1)
    ancestors_BxTxT = ancestors_BxTxT.at[:, node + 1].set(ancestors_BxTxT[rows_B, parent_slot_B]
                                                          | (jnp.arange(n + 1)[None, :] == node + 1))
  return TreeLayout(root_slot_B=jnp.broadcast_to(jnp.asarray(root_slot_B, jnp.int32), (batch,)), depth_BxT=depth_BxT,
                    ancestors_BxTxT=ancestors_BxTxT)


def tree_visibility(key_slots_S, query_slots_BxQ, tree: TreeLayout):
  """visible_BxQxS: the committed prefix (slots before the root's) and the query's own ancestors among the tree's
  slots; nothing after the tree."""
  t_len = tree.ancestors_BxTxT.shape[-1]
  query_rows_BxQ = query_slots_BxQ - tree.root_slot_B[:, None]
  rows_BxQxT = jnp.take_along_axis(tree.ancestors_BxTxT, query_rows_BxQ[:, :, None], axis=1)
  relative_BxS = key_slots_S[None, :] - tree.root_slot_B[:, None]
  in_tree_BxS = (relative_BxS >= 0) & (relative_BxS < t_len)
  index_BxQxS = jnp.broadcast_to(jnp.clip(relative_BxS, 0, t_len - 1)[:, None, :],
                                 query_slots_BxQ.shape + relative_BxS.shape[1:])
  seen_BxQxS = jnp.take_along_axis(rows_BxQxT, index_BxQxS, axis=2)
  return jnp.where(in_tree_BxS[:, None, :], seen_BxQxS, (relative_BxS < 0)[:, None, :])


def compact_path(cache: KVCache, base_B, path_BxN, n_accepted_B) -> KVCache:
  """The cache with each row's accepted nodes (path_BxN: node indices root first, n_accepted_B of them) moved from
  their tree slots base + 1 + node to base + 1, base + 2, ...; the slots after them are left as they were."""
  index_N = jnp.arange(path_BxN.shape[1])
  return permute_window(cache, base_B, jnp.where(index_N[None, :] < n_accepted_B[:, None], path_BxN, index_N[None, :]))


def permute_window(cache: KVCache, base_B, source_BxW) -> KVCache:
  """The cache with slot base + 1 + i holding what slot base + 1 + source_BxW[b, i] held, for the W slots after
  each row's base (the caller leaves room for them)."""
  width = source_BxW.shape[1]

  def move(array_LxBxSxKxD):
    def row(a_LxSxKxD, base, source_W):
      window = jax.lax.dynamic_slice_in_dim(a_LxSxKxD, base + 1, width, axis=1)
      return jax.lax.dynamic_update_slice_in_dim(a_LxSxKxD, jnp.take(window, source_W, axis=1), base + 1, axis=1)
    return jax.vmap(row, in_axes=(1, 0, 0), out_axes=1)(array_LxBxSxKxD, base_B, source_BxW)

  return cache.replace(k=move(cache.k), v=move(cache.v))
