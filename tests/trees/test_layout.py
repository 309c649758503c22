"""A token tree in one target call: every node's logits are those of its root path scored as a chain, and after
compaction the cache is the chain's cache of the accepted tokens, per row, with ragged bases and acceptance."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.cache import init_cache
from specjax.trees.layout import compact_path, tree_layout

CONFIG = specjax.ModelConfig(vocab_size=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64,
                             max_seq_len=128, tie_embeddings=False)
PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3, 5, 8, 9]]   # ragged: the trees start at different slots
PARENTS = np.array([[-1, -1, 0, 0, 1, 2], [-1, 0, 0, 1, -1, 4]], np.int32)
NODES = np.array([[7, 11, 13, 17, 19, 23], [29, 2, 4, 6, 8, 10]], np.int32)


@pytest.fixture(scope="module")
def model():
  return specjax.init_model(CONFIG, seed=0)


def prefilled(module):
  """The cache after each prompt but its last token (a committed prefix), and each row's root slot."""
  width = max(map(len, PROMPTS))
  tokens = jnp.asarray([p + [0] * (width - len(p)) for p in PROMPTS], jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), tokens.shape)
  _, cache, _ = module.hidden_states(tokens, positions, init_cache(CONFIG, len(PROMPTS), 64))
  return cache, np.array([len(p) - 1 for p in PROMPTS])


def tree_call(module, cache, base_B):
  tokens = jnp.asarray(np.concatenate([[[p[-1]] for p in PROMPTS], NODES], axis=1))
  slots = jnp.asarray(base_B[:, None] + np.arange(tokens.shape[1])[None, :], jnp.int32)
  hidden, cache, _ = module.hidden_states(tokens, slots, cache, tree=tree_layout(PARENTS, base_B))
  return module.logits(hidden), cache


def root_path(row: int, node: int) -> list[int]:
  path = []
  while node >= 0:
    path.append(node)
    node = int(PARENTS[row, node])
  return path[::-1]


def chain_call(module, cache, row: int, base: int, tokens: list[int]):
  """The chain [root] + tokens scored for one row from the committed prefix: (logits [T, V], cache)."""
  row_cache = cache.replace(k=cache.k[:, row:row + 1], v=cache.v[:, row:row + 1], lengths=cache.lengths[row:row + 1])
  positions = jnp.asarray([base + np.arange(len(tokens) + 1)], jnp.int32)
  chain = jnp.asarray([[PROMPTS[row][-1]] + tokens], jnp.int32)
  logits, _, row_cache = module(chain, positions, row_cache)
  return logits[0], row_cache


def test_every_node_scores_as_its_root_path(model):
  module = model.module()
  cache, base_B = prefilled(module)
  logits, _ = tree_call(module, cache, base_B)
  for row in range(len(PROMPTS)):
    root_logits, _ = chain_call(module, cache, row, int(base_B[row]), [])
    np.testing.assert_allclose(logits[row, 0], root_logits[0], atol=1e-5, rtol=1e-5)
    for node in range(NODES.shape[1]):
      path = root_path(row, node)
      want, _ = chain_call(module, cache, row, int(base_B[row]), [int(NODES[row, i]) for i in path])
      np.testing.assert_allclose(logits[row, node + 1], want[-1], atol=1e-5, rtol=1e-5, err_msg=f"{row} {node}")


def test_a_chain_tree_is_the_causal_call(model):
  module = model.module()
  cache, base_B = prefilled(module)
  tokens = jnp.asarray([[p[-1], 5, 6, 7] for p in PROMPTS], jnp.int32)
  slots = jnp.asarray(base_B[:, None] + np.arange(4)[None, :], jnp.int32)
  chain_parents = np.broadcast_to(np.array([-1, 0, 1], np.int32), (len(PROMPTS), 3))
  as_tree, _, _ = module.hidden_states(tokens, slots, cache, tree=tree_layout(chain_parents, base_B))
  causal, _, _ = module.hidden_states(tokens, slots, cache)
  np.testing.assert_allclose(as_tree, causal, atol=1e-6, rtol=1e-6)


def test_compaction_leaves_the_chain_cache_of_the_accepted_path(model):
  """Row 0 accepts nodes 1 then 4 (the root's second child: not the first branch), row 1 accepts node 0 only."""
  module = model.module()
  cache, base_B = prefilled(module)
  _, tree_cache = tree_call(module, cache, base_B)
  path = jnp.asarray([[1, 4, -1, -1, -1, -1], [0, -1, -1, -1, -1, -1]], jnp.int32)
  n_accepted = jnp.asarray([2, 1], jnp.int32)
  compacted = jax.jit(compact_path)(tree_cache, jnp.asarray(base_B, jnp.int32), path, n_accepted)
  for row in range(len(PROMPTS)):
    accepted = [int(NODES[row, i]) for i in np.asarray(path[row, :int(n_accepted[row])])]
    _, want = chain_call(module, cache, row, int(base_B[row]), accepted)
    end = int(base_B[row]) + 1 + len(accepted)
    for name in ("k", "v"):
      np.testing.assert_allclose(getattr(compacted, name)[:, row, :end], getattr(want, name)[:, 0, :end],
                                 atol=1e-5, rtol=1e-5, err_msg=f"{name} row {row}")


def test_level_by_level_calls_score_as_the_whole_tree(model):
  """A drafter's way: the root, then the tree's slots one level at a time, each call attending to the entries the
  earlier calls wrote."""
  module = model.module()
  cache, base_B = prefilled(module)
  whole, _ = tree_call(module, cache, base_B)
  tokens = np.concatenate([[[p[-1]] for p in PROMPTS], NODES], axis=1)
  layout = tree_layout(PARENTS, base_B)
  got = []
  for start, stop in ((0, 1), (1, 3), (3, 5), (5, 7)):
    slots = jnp.asarray(base_B[:, None] + np.arange(start, stop)[None, :], jnp.int32)
    hidden, cache, _ = module.hidden_states(jnp.asarray(tokens[:, start:stop]), slots, cache, tree=layout)
    got.append(module.logits(hidden))
  np.testing.assert_allclose(jnp.concatenate(got, axis=1), whole, atol=1e-5, rtol=1e-5)


def test_depths_and_ancestors():
  layout = tree_layout(np.array([[-1, -1, 0, 2, -3]], np.int32), 0)
  assert layout.depth_BxT[0].tolist() == [0, 1, 1, 2, 3, 1]
  assert np.flatnonzero(layout.ancestors_BxTxT[0, 4]).tolist() == [0, 1, 3, 4]
  assert np.flatnonzero(layout.ancestors_BxTxT[0, 5]).tolist() == [0, 5]  # padding: the root and itself


def test_a_parent_after_its_child_is_named():
  with pytest.raises(ValueError, match="node 1 of row 0 has parent 2"):
    tree_layout(np.array([[-1, 2, 0]], np.int32), 0)
