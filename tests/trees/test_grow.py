"""Growing trees (`specjax.trees.grow`): dynamic (EAGLE-2) and static trees drafted by a Markov draft keep the
target's joint distribution of the first three tokens under exact acceptance, for both branchings and every
sampling setting; the kept tree is topological and ancestor-closed; the sampled rule fails on top-k children, and
would fail on sampled children if the tree's shape followed the drawn tokens' own probabilities."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.sampling import SamplingParams
from specjax.trees import grow as grow_module
from specjax.trees.dynamic import DynamicTree
from specjax.trees.grow import grow
from specjax.trees.rejection import accept_tree
from specjax.trees.static import StaticTree
from test_rejection import ALPHA, chi_square_pvalue
from trees.test_rejection import N_TOKENS, SAMPLES, START, VOCAB, tables, target_joint

TREE = StaticTree(((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0)))


def draft_logits(sampling, disjoint=False, seed=0):
  """The draft's raw logits after each token (what `tables` turns into q), and the target's p."""
  rng = np.random.default_rng(seed)
  target = rng.normal(size=(VOCAB, VOCAB)) * 1.5
  draft = -target if disjoint else target + rng.normal(size=(VOCAB, VOCAB))
  p_VxV, _ = tables(sampling, seed=seed, disjoint=disjoint)
  return jnp.asarray(draft, jnp.float32), p_VxV


def sampled_joint(tree, sampling, *, rule=None, n=SAMPLES, seed=0, disjoint=False):
  """Counts [V, V, V] of the first three tokens of n rows, each three rounds of a grown tree; also the kept trees'
  parents of the last round."""
  logits_VxV, p_VxV = draft_logits(sampling, disjoint=disjoint)
  rule = rule or tree.branching

  def expand(state, tokens_BxL, payload, slots_BxL, layout, depth):
    return logits_VxV[tokens_BxL], (), state

  @jax.jit
  def generate(key):
    buffer = jnp.zeros((n, N_TOKENS * (tree.max_depth + 1)), jnp.int32)
    pos_B, last_B = jnp.zeros((n,), jnp.int32), jnp.full((n,), START, jnp.int32)
    rows_B = jnp.arange(n)
    parents_BxN = None
    for round_key in jax.random.split(key, N_TOKENS):
      tree_key, accept_key = jax.random.split(round_key)
      draft, _ = grow(tree, expand, (), logits_VxV[last_B], (), pos_B, sampling, jax.random.split(tree_key, n))
      parents_BxN = draft.parent_BxN
      contexts_BxN1 = jnp.concatenate([last_B[:, None], draft.tokens_BxN], axis=1)
      path, n_accepted, next_B = accept_tree(p_VxV[contexts_BxN1], draft.q_BxN1xV, draft.tokens_BxN,
                                             draft.parent_BxN, jax.random.split(accept_key, n), branching=rule,
                                             greedy=sampling.greedy)
      index = jnp.arange(tree.max_depth + 1)[None, :]
      path_BxD1 = jnp.pad(path, ((0, 0), (0, 1)), constant_values=-1)[:, :tree.max_depth + 1]
      tokens_BxD1 = jnp.take_along_axis(draft.tokens_BxN, jnp.maximum(path_BxD1, 0), axis=1)
      emitted = jnp.where(index < n_accepted[:, None], tokens_BxD1, next_B[:, None])
      buffer = buffer.at[rows_B[:, None], pos_B[:, None] + index].set(emitted, mode="drop")
      pos_B = pos_B + n_accepted + 1
      last_B = buffer[rows_B, pos_B - 1]
    return buffer[:, :N_TOKENS], parents_BxN

  out, parents = (np.asarray(x) for x in generate(jax.random.key(seed)))
  counts = np.zeros((VOCAB,) * N_TOKENS, np.int64)
  np.add.at(counts, tuple(out.T), 1)
  return counts, p_VxV, parents


CASES = [  # (branching, sampling, tree shape): each branching meets three settings and three shapes
    ("top_k", SamplingParams(temperature=1.0), DynamicTree(nodes=6, depth=3, top_k=3)),
    ("sample", SamplingParams(temperature=1.0), DynamicTree(nodes=4, depth=3, top_k=2)),
    ("top_k", SamplingParams(temperature=0.5), DynamicTree(nodes=8, depth=3, top_k=2)),
    ("sample", SamplingParams(temperature=1.5), DynamicTree(nodes=6, depth=3, top_k=3)),
    ("top_k", SamplingParams(temperature=1.0, top_p=0.8), DynamicTree(nodes=3, depth=1, top_k=3)),
    ("sample", SamplingParams(temperature=1.0, top_k=4), DynamicTree(nodes=8, depth=3, top_k=2)),
]


@pytest.mark.parametrize("branching,sampling,shape", CASES, ids=lambda x: getattr(x, "temperature", None) and
                         f"t{x.temperature}-k{x.top_k}-p{x.top_p}")
def test_dynamic_tree_joint_equals_target(branching, sampling, shape):
  tree = DynamicTree(shape.nodes, shape.depth, shape.top_k, branching)
  counts, p, _ = sampled_joint(tree, sampling, seed=CASES.index((branching, sampling, shape)))
  assert chi_square_pvalue(counts, target_joint(p)) > ALPHA, tree


def test_static_tree_grown_level_by_level_is_exact():
  tree = StaticTree(TREE.paths, "sample")
  counts, p, parents = sampled_joint(tree, SamplingParams(temperature=1.0))
  assert chi_square_pvalue(counts, target_joint(p)) > ALPHA
  assert (parents == np.asarray(tree.parents)).all()


def test_dynamic_tree_with_disjoint_draft_support_is_exact():
  counts, p, _ = sampled_joint(DynamicTree(6, 3, 2, "sample"), SamplingParams(temperature=1.0, top_k=2),
                               disjoint=True)
  assert chi_square_pvalue(counts, target_joint(p)) > ALPHA


def test_kept_trees_are_topological_and_ancestor_closed():
  _, _, parents_BxN = sampled_joint(DynamicTree(8, 4, 3), SamplingParams(temperature=1.0), n=500)
  nodes_N = np.arange(parents_BxN.shape[1])
  assert (parents_BxN < nodes_N[None, :]).all() and (parents_BxN >= -1).all()
  assert len({tuple(row) for row in parents_BxN}) > 1  # the shape follows the draft, row by row


def test_greedy_dynamic_tree_follows_the_target_argmax():
  counts, p, _ = sampled_joint(DynamicTree(6, 3, 2, "sample"), SamplingParams(temperature=0.0), n=2000)
  assert counts[target_joint(p) == 1].sum() == 2000


def test_the_sampled_rule_on_dynamic_top_k_children_fails():
  counts, p, _ = sampled_joint(DynamicTree(6, 3, 3), SamplingParams(temperature=1.0), rule="sample")
  assert chi_square_pvalue(counts, target_joint(p)) < ALPHA


def test_shaping_a_sampled_tree_by_the_drawn_tokens_would_not_be_exact(monkeypatch):
  """Why a sampled tree's values follow the rank: valued by what was drawn, which later siblings are kept
  depends on their own tokens, and recursive rejection sampling is biased."""
  ranked = grow_module.ranked_children

  def valued_by_draw(logits_BxV, q_BxV, width, branching, keys_B):
    children_BxW, _ = ranked(logits_BxV, q_BxV, width, branching, keys_B)
    return children_BxW, jnp.take_along_axis(jax.nn.log_softmax(logits_BxV, axis=-1), children_BxW, axis=1)

  monkeypatch.setattr(grow_module, "ranked_children", valued_by_draw)
  counts, p, _ = sampled_joint(DynamicTree(2, 1, 3, "sample"), SamplingParams(temperature=1.0), n=40_000)
  assert chi_square_pvalue(counts, target_joint(p)) < ALPHA
