"""Drafting a token tree, static or dynamic, with any drafter that scores contexts.

A drafter gives `grow` its logits after the root (the last committed token) and `expand`, which runs the drafter on
some nodes of one level: expand(state, tokens_BxL, parent_payload, slots_BxL, layout, depth) -> (logits_BxLxV,
payload, state). The payload is what the drafter carries from a node to its children (the feature head's output
feature, prompt lookup's path so far), a pytree of [B, L, ...] arrays ([B, ...] for the root). Only nodes with
children are expanded, in order of expansion, at consecutive cache slots root + 1 + e (e: the expansion's index);
`layout` is the TreeLayout of the expanded nodes over those slots, so a drafter with a cache writes and attends
exactly as the target will over the verified tree. `entries_in_node_order` then moves each verified node's entry
to root + 1 + its node index, where the target's call and `compact_path` expect it.
"""

import flax.struct
import jax
import jax.numpy as jnp

from specjax.sampling import distribution, rank_of, top_k
from specjax.trees.layout import permute_window, tree_layout
from specjax.trees.static import StaticTree


@flax.struct.dataclass
class TreeDraft:
  """tokens_BxN, parent_BxN (-1: the root) in topological order; q_BxN1xV: what each context's children were drawn
  from (the root's first, then each node's); entry_BxN: the expansion index of a node's entry, -1 if never run."""

  tokens_BxN: jax.Array
  parent_BxN: jax.Array
  q_BxN1xV: jax.Array
  entry_BxN: jax.Array


def ranked_children(logits_BxV, q_BxV, width: int, branching: str, keys_B):
  """(children_BxW, values_BxW): one context's children in rank order, the draft's top choices ("top_k") or draws
  from q without replacement in draw order ("sample", Gumbel top-k; tokens outside q's support come last), and
  the draft's log-probability of each rank (the top log-probabilities, in order: for "top_k" the children's own;
  for "sample" independent of what was drawn, so that a tree shaped by values keeps the sampled rule exact)."""
  logits_BxV = logits_BxV.astype(jnp.float32)
  top_BxW, children_BxW = top_k(logits_BxV, width)
  # log_softmax at the top logits only, as jax.nn.log_softmax computes it: one top_k over V instead of two
  max_Bx1 = jnp.max(logits_BxV, axis=-1, keepdims=True)
  values_BxW = (top_BxW - max_Bx1) - jnp.log(jnp.sum(jnp.exp(logits_BxV - max_Bx1), axis=-1, keepdims=True))
  if branching == "top_k":
    return children_BxW, values_BxW
  gumbel_BxV = jax.vmap(lambda key: jax.random.gumbel(key, logits_BxV.shape[1:]))(keys_B)
  return top_k(jnp.where(q_BxV > 0, jnp.log(q_BxV) + gumbel_BxV, -jnp.inf), width)[1], values_BxW


def _context_keys(keys_B, context: int):
  return jax.vmap(lambda key: jax.random.fold_in(key, context))(keys_B)


def _stack(pytrees):
  return jax.tree.map(lambda *xs: jnp.stack(xs, axis=1), *pytrees)


def _expand_level(expand, state, tokens_BxL, parent_payload, exp_parent_BxE, first: int, root_slot_B, depth: int):
  """Runs `expand` on expansions first..first + L - 1 (their parents among the expansions in exp_parent_BxE)."""
  slots_BxL = root_slot_B[:, None] + 1 + first + jnp.arange(tokens_BxL.shape[1], dtype=jnp.int32)[None, :]
  layout = tree_layout(exp_parent_BxE, root_slot_B)
  return expand(state, tokens_BxL, parent_payload, slots_BxL, layout, depth)


def grow(tree, expand, state, root_logits_BxV, root_payload, root_slot_B, sampling, keys_B):
  """(TreeDraft, state): the tree's nodes, drawn the tree's way (`tree.branching`), and the drafter's state."""
  if isinstance(tree, StaticTree):
    return _grow_static(tree, expand, state, root_logits_BxV, root_payload, root_slot_B, sampling, keys_B)
  return _grow_dynamic(tree, expand, state, root_logits_BxV, root_payload, root_slot_B, sampling, keys_B)


def _static_expansions(tree: StaticTree) -> list[int]:
  """The nodes of a static tree that have children, level by level like the nodes: its expansions, in order."""
  return sorted(set(tree.parents) - {-1})


def _grow_static(tree, expand, state, root_logits_BxV, root_payload, root_slot_B, sampling, keys_B):
  batch, n = root_logits_BxV.shape[0], tree.n_nodes
  parents, ranks, depths = tree.parents, tree.ranks, tree.depths
  expanded = _static_expansions(tree)
  expansion = {node: e for e, node in enumerate(expanded)}
  exp_parent_BxE = jnp.broadcast_to(jnp.asarray([expansion.get(parents[node], -1) for node in expanded] or [-1],
                                                jnp.int32), (batch, max(len(expanded), 1)))
  logits, q, payload = {0: root_logits_BxV}, {0: distribution(root_logits_BxV, sampling)}, {0: root_payload}
  ranked, tokens = {}, [None] * n
  width = tree.width
  for depth in range(1, tree.max_depth + 1):
    level = [node for node in range(n) if depths[node] == depth]
    for node in level:
      context = parents[node] + 1
      if context not in ranked:
        ranked[context] = ranked_children(logits[context], q[context], width, tree.branching,
                                          _context_keys(keys_B, context))[0]
      tokens[node] = rank_of(ranked[context], ranks[node])
    runs = [node for node in level if node in expansion]
    if not runs:
      continue
    level_logits, level_payload, state = _expand_level(
        expand, state, jnp.stack([tokens[node] for node in runs], axis=1),
        _stack([payload[parents[node] + 1] for node in runs]), exp_parent_BxE, expansion[runs[0]], root_slot_B, depth)
    level_q = distribution(level_logits, sampling)
    for j, node in enumerate(runs):
      logits[node + 1], q[node + 1] = level_logits[:, j], level_q[:, j]
      payload[node + 1] = jax.tree.map(lambda a: a[:, j], level_payload)
  q_BxN1xV = jnp.stack([q.get(context, q[0]) for context in range(n + 1)], axis=1)  # a leaf's q is never read
  broadcast = lambda values: jnp.broadcast_to(jnp.asarray(values, jnp.int32), (batch, n))
  return TreeDraft(tokens_BxN=jnp.stack(tokens, axis=1).astype(jnp.int32), parent_BxN=broadcast(parents),
                   q_BxN1xV=q_BxN1xV, entry_BxN=broadcast([expansion.get(node, -1) for node in range(n)])), state


def _grow_dynamic(tree, expand, state, root_logits_BxV, root_payload, root_slot_B, sampling, keys_B):
  """EAGLE-2: expand the top_k proposals of highest value per level, keep the N of highest value overall."""
  batch, k = root_logits_BxV.shape[0], tree.top_k
  rows_B1 = jnp.arange(batch)[:, None]
  root_q_BxV = distribution(root_logits_BxV, sampling)
  tokens_BxC, values_BxC = ranked_children(root_logits_BxV, root_q_BxV, k, tree.branching, _context_keys(keys_B, 0))
  # Proposals of one level: token, value, parent proposal (-1: the root), parent expansion (-1: the root).
  tokens, values = [tokens_BxC], [values_BxC]
  parent_prop, parent_exp = [jnp.full((batch, k), -1, jnp.int32)], [jnp.full((batch, k), -1, jnp.int32)]
  prop_entry = []                                      # per level: each proposal's expansion index or -1
  exp_parent_BxE = jnp.full((batch, max(tree.expanded, 1)), -1, jnp.int32)
  q_by_expansion, payload_BxL, offset = [], None, 0
  for depth in range(1, tree.max_depth):  # a node deeper than N has N ancestors ahead of it: never kept
    beam_BxK = jax.lax.top_k(values[-1], k)[1]          # the level's best proposals, in proposal order of value
    first = (depth - 1) * k
    exp_parent_BxE = exp_parent_BxE.at[:, first:first + k].set(jnp.take_along_axis(parent_exp[-1], beam_BxK, 1))
    if depth == 1:
      parent_payload = jax.tree.map(lambda a: jnp.repeat(a[:, None], k, axis=1), root_payload)
    else:
      beam_parent_BxK = jnp.take_along_axis(parent_exp[-1], beam_BxK, 1) - (first - k)
      parent_payload = jax.tree.map(lambda a: jnp.take_along_axis(
          a, beam_parent_BxK.reshape(beam_parent_BxK.shape + (1,) * (a.ndim - 2)), 1), payload_BxL)
    beam_tokens_BxK = jnp.take_along_axis(tokens[-1], beam_BxK, 1)
    logits_BxKxV, payload_BxL, state = _expand_level(expand, state, beam_tokens_BxK, parent_payload, exp_parent_BxE,
                                                     first, root_slot_B, depth)
    q_BxKxV = distribution(logits_BxKxV, sampling)
    q_by_expansion.append(q_BxKxV)
    prop_entry.append(jnp.full(tokens[-1].shape, -1, jnp.int32).at[rows_B1, beam_BxK].set(first + jnp.arange(k)))
    children = [ranked_children(logits_BxKxV[:, j], q_BxKxV[:, j], k, tree.branching,
                                _context_keys(keys_B, 1 + first + j)) for j in range(k)]
    beam_values_BxK = jnp.take_along_axis(values[-1], beam_BxK, 1)
    tokens.append(jnp.concatenate([c[0] for c in children], axis=1))
    values.append(jnp.concatenate([beam_values_BxK[:, j, None] + c[1] for j, c in enumerate(children)], axis=1))
    parent_prop.append(jnp.repeat(offset + beam_BxK, k, axis=1))
    parent_exp.append(jnp.broadcast_to(jnp.repeat(first + jnp.arange(k, dtype=jnp.int32), k), (batch, k * k)))
    offset += tokens[-2].shape[1]
  prop_entry.append(jnp.full(tokens[-1].shape, -1, jnp.int32))
  all_tokens, all_values = jnp.concatenate(tokens, 1), jnp.concatenate(values, 1)
  all_parent, all_entry = jnp.concatenate(parent_prop, 1), jnp.concatenate(prop_entry, 1)
  # Values never grow down a path and top_k breaks ties by index (shallower first): a kept node's parent is kept.
  kept_BxN = jnp.sort(jax.lax.top_k(all_values, tree.n_nodes)[1], axis=1)
  node_of_prop = jnp.full(all_values.shape, -1, jnp.int32).at[rows_B1, kept_BxN].set(
      jnp.arange(tree.n_nodes, dtype=jnp.int32))
  parent_of_kept = jnp.take_along_axis(all_parent, kept_BxN, 1)
  parent_BxN = jnp.where(parent_of_kept >= 0,
                         jnp.take_along_axis(node_of_prop, jnp.maximum(parent_of_kept, 0), 1), -1)
  entry_BxN = jnp.take_along_axis(all_entry, kept_BxN, 1)
  q_BxN1xV = root_q_BxV[:, None]
  if q_by_expansion:
    q_BxExV = jnp.concatenate(q_by_expansion, axis=1)
    node_q = jnp.take_along_axis(q_BxExV, jnp.maximum(entry_BxN, 0)[:, :, None], 1)
    q_BxN1xV = jnp.concatenate([q_BxN1xV, jnp.where(entry_BxN[:, :, None] >= 0, node_q, root_q_BxV[:, None])], 1)
  else:
    q_BxN1xV = jnp.broadcast_to(q_BxN1xV, (batch, tree.n_nodes + 1, root_q_BxV.shape[-1]))
  return TreeDraft(tokens_BxN=jnp.take_along_axis(all_tokens, kept_BxN, 1).astype(jnp.int32), parent_BxN=parent_BxN,
                   q_BxN1xV=q_BxN1xV, entry_BxN=entry_BxN), state


def entries_in_node_order(cache, root_slot_B, draft: TreeDraft, tree):
  """The drafter's cache with each verified node's entry at root + 1 + its node index (expansions that were not
  verified stay behind as garbage past the committed length)."""
  if isinstance(tree, StaticTree):
    expansions = _static_expansions(tree)
    if expansions == list(range(len(expansions))):
      return cache  # every expansion already sits at its node's slot
  width = tree.slots
  index_W = jnp.arange(width, dtype=jnp.int32)
  entry_BxW = jnp.pad(draft.entry_BxN, ((0, 0), (0, width - tree.n_nodes)), constant_values=-1)
  return permute_window(cache, root_slot_B, jnp.where(entry_BxW >= 0, entry_BxW, index_W[None, :]))
