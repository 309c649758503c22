"""Exactness of tree acceptance: the first three tokens emitted by rounds of tree drafts are distributed as the
target's, for both branching modes, sampling settings, tree shapes and a draft with disjoint support; the sampled
rule on top-k children, and accepting by argmax, fail the same chi-square test. The target-only rule never reads q
(each visit asks whether the target's own draw is this child), so it stays exact on sampled children too, and
accepts less there than recursive rejection sampling.

The target and the draft are Markov chains over a small vocabulary (the next token's logits depend on the last
token), turned into distributions by `specjax.sampling.distribution`, so the target's joint is exact.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.sampling import SamplingParams, distribution
from specjax.trees.rejection import BRANCHINGS, accept_tree
from test_rejection import ALPHA, chi_square_pvalue

VOCAB = 6
N_TOKENS = 3
SAMPLES = 20_000
START = 0


def tables(sampling, seed=0, disjoint=False):
  """(p_VxV, q_VxV): the target's and the draft's next-token distributions after each token."""
  rng = np.random.default_rng(seed)
  target = rng.normal(size=(VOCAB, VOCAB)) * 1.5
  draft = -target if disjoint else target + rng.normal(size=(VOCAB, VOCAB))
  return (distribution(jnp.asarray(target, jnp.float32), sampling),
          distribution(jnp.asarray(draft, jnp.float32), sampling))


def target_joint(p_VxV) -> np.ndarray:
  p = np.asarray(p_VxV, np.float64)
  return p[START][:, None, None] * p[:, :, None] * p[None, :, :]


def full_tree(width: int, depth: int) -> np.ndarray:
  """Parents of a full width-ary tree of this depth, level by level (-1: the root)."""
  parents, level = [], [-1]
  for _ in range(depth):
    next_level = []
    for parent in level:
      for _ in range(width):
        parents.append(parent)
        next_level.append(len(parents) - 1)
    level = next_level
  return np.asarray(parents, np.int32)


def draw_children(q_V, width: int, key, branching: str):
  """`width` distinct children: the draft's top-k, or drawn without replacement from q (Gumbel top-k)."""
  if branching == "top_k":
    return jax.lax.top_k(q_V, width)[1]
  gumbel = jax.random.gumbel(key, q_V.shape)
  return jax.lax.top_k(jnp.where(q_V > 0, jnp.log(q_V) + gumbel, -jnp.inf), width)[1]


def build_tree(q_VxV, last, parents, width, key, branching):
  tokens = []
  keys = jax.random.split(key, len(parents) // width)
  for group, start in enumerate(range(0, len(parents), width)):
    parent = parents[start]
    context = last if parent < 0 else tokens[parent]
    tokens.extend(draw_children(q_VxV[context], width, keys[group], branching))
  return jnp.stack(tokens).astype(jnp.int32)


def sampled_joint(sampling, width, depth, *, draw="top_k", rule="top_k", disjoint=False, seed=0, n=SAMPLES,
                  accept=accept_tree, with_rate=False):
  """Counts [V, V, V] of the first three tokens over n generations of three tree rounds (and, with_rate, the mean
  tokens a round emitted)."""
  p_VxV, q_VxV = tables(sampling, disjoint=disjoint)
  parents = full_tree(width, depth)
  greedy = sampling.greedy

  def generate(key):
    buffer = jnp.zeros((N_TOKENS * (depth + 1),), jnp.int32)
    pos, last = jnp.int32(0), jnp.int32(START)
    for round_key in jax.random.split(key, N_TOKENS):
      tree_key, accept_key = jax.random.split(round_key)
      tokens = build_tree(q_VxV, last, parents, width, tree_key, draw)
      contexts = jnp.concatenate([last[None], tokens])
      path, n_accepted, next_token = accept(p_VxV[contexts][None], q_VxV[contexts][None], tokens[None],
                                            jnp.asarray(parents)[None], accept_key[None], branching=rule,
                                            greedy=greedy)
      index = jnp.arange(depth + 1)
      path_D1 = jnp.concatenate([path[0], jnp.full((1,), -1, jnp.int32)])[:depth + 1]
      emitted = jnp.where(index < n_accepted[0], tokens[jnp.maximum(path_D1, 0)], next_token[0])
      buffer = jax.lax.dynamic_update_slice(buffer, emitted, (pos,))
      pos = pos + n_accepted[0] + 1
      last = buffer[pos - 1]
    return buffer[:N_TOKENS], pos

  out, emitted = (np.asarray(x) for x in jax.jit(jax.vmap(generate))(jax.random.split(jax.random.key(seed), n)))
  counts = np.zeros((VOCAB,) * N_TOKENS, np.int64)
  np.add.at(counts, tuple(out.T), 1)
  return (counts, p_VxV, emitted.mean() / N_TOKENS) if with_rate else (counts, p_VxV)


SETTINGS = [SamplingParams(temperature=1.0), SamplingParams(temperature=0.5), SamplingParams(temperature=1.5),
            SamplingParams(temperature=1.0, top_k=4), SamplingParams(temperature=1.0, top_p=0.8)]
SHAPES = [(1, 3), (2, 2), (3, 1), (4, 2)]


@pytest.mark.parametrize("branching", ["top_k", "sample"])
@pytest.mark.parametrize("sampling", SETTINGS, ids=lambda s: f"t{s.temperature}-k{s.top_k}-p{s.top_p}")
def test_tree_joint_equals_target(branching, sampling):
  """One shape per case, in turn: each branching meets every shape, each shape two or three settings."""
  index = (SETTINGS.index(sampling) + BRANCHINGS.index(branching)) % len(SHAPES)
  width, depth = SHAPES[index]
  counts, p = sampled_joint(sampling, width, depth, draw=branching, rule=branching, seed=index)
  assert chi_square_pvalue(counts, target_joint(p)) > ALPHA, (width, depth)


@pytest.mark.parametrize("branching", ["top_k", "sample"])
def test_tree_with_disjoint_draft_support_is_exact(branching):
  sampling = SamplingParams(temperature=1.0, top_k=2)
  counts, p = sampled_joint(sampling, 2, 2, draw=branching, rule=branching, disjoint=True)
  assert chi_square_pvalue(counts, target_joint(p)) > ALPHA


@pytest.mark.parametrize("branching", ["top_k", "sample"])
def test_greedy_tree_follows_the_target_argmax(branching):
  sampling = SamplingParams(temperature=0.0)
  counts, p = sampled_joint(sampling, 3, 2, draw=branching, rule=branching, n=2000)
  expected = target_joint(p)
  assert counts[expected == 1].sum() == 2000


@pytest.mark.parametrize("seed", range(4))
def test_the_greedy_walk_equals_the_general_rule_on_one_hot_p(seed):
  """The greedy walk reads token ids only; on one-hot p the target-only rule makes the same choices whatever the
  uniforms (a child is accepted iff it holds all the mass), so the two agree node for node."""
  rng = np.random.default_rng(seed)
  batch, n, vocab = 8, 7, 5
  parents = np.asarray([-1, -1, 0, 0, 1, 2, 2])
  tokens = rng.integers(0, vocab, (batch, n))
  p = jax.nn.one_hot(rng.integers(0, vocab, (batch, n + 1)), vocab)
  keys = jax.random.split(jax.random.key(seed), batch)
  args = (p, p, jnp.asarray(tokens), jnp.broadcast_to(jnp.asarray(parents), (batch, n)), keys)
  greedy = accept_tree(*args, branching="top_k", greedy=True)
  general = accept_tree(*args, branching="top_k")
  for ours, theirs in zip(greedy, general):
    np.testing.assert_array_equal(ours, theirs)
  assert int(greedy[1].max()) >= 1   # some rows accept a node


def test_the_sampled_rule_on_top_k_children_fails():
  counts, p = sampled_joint(SamplingParams(temperature=1.0), 2, 2, draw="top_k", rule="sample")
  assert chi_square_pvalue(counts, target_joint(p)) < ALPHA


def test_the_target_only_rule_is_exact_on_sampled_children_but_accepts_less():
  sampling = SamplingParams(temperature=1.0)
  counts, p, target_only_rate = sampled_joint(sampling, 2, 2, draw="sample", rule="top_k", with_rate=True)
  assert chi_square_pvalue(counts, target_joint(p)) > ALPHA
  _, _, recursive_rate = sampled_joint(sampling, 2, 2, draw="sample", rule="sample", with_rate=True)
  assert recursive_rate > target_only_rate + 0.05, (recursive_rate, target_only_rate)


def test_accepting_by_argmax_fails():
  """Accepting a child iff it is the target's argmax, then sampling from p, is not exact: detected."""

  def argmax_rule(p, q, tokens, parents, keys, branching, greedy):
    path, n, _ = accept_tree(p, q, tokens, parents, keys, branching=branching, greedy=True)
    rows = jnp.arange(p.shape[0])
    last_node = jnp.where(n > 0, path[rows, jnp.maximum(n - 1, 0)], -1)
    return path, n, jax.vmap(lambda key, probs: jax.random.categorical(key, jnp.log(probs)))(
        keys, p[rows, last_node + 1]).astype(jnp.int32)

  sampling = SamplingParams(temperature=1.0)
  counts, p = sampled_joint(sampling, 2, 2, accept=argmax_rule)
  assert chi_square_pvalue(counts, target_joint(p)) < ALPHA


def test_padding_nodes_are_never_visited():
  p = jnp.asarray([[[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]]])
  path, n, next_token = accept_tree(p, p, jnp.asarray([[1, 0]]), jnp.asarray([[-1, -2]]), jax.random.key(0)[None],
                                    branching="top_k")
  assert int(n[0]) == 1 and path[0].tolist() == [0, -1] and int(next_token[0]) == 0


def test_bad_trees_are_named():
  p = jnp.ones((1, 3, 4)) / 4
  with pytest.raises(ValueError, match="unknown branching"):
    accept_tree(p, p, jnp.zeros((1, 2), jnp.int32), jnp.asarray([[-1, 0]]), jax.random.key(0)[None],
                branching="beam")
  with pytest.raises(ValueError, match="3 nodes needs p and q at 4 contexts"):
    accept_tree(p, p, jnp.zeros((1, 3), jnp.int32), jnp.asarray([[-1, 0, 1]]), jax.random.key(0)[None],
                branching="top_k")


def test_greedy_tree_acceptance_from_ids_checks_its_shapes():
  from specjax.trees.rejection import accept_tree_greedy
  tokens, parents = jnp.asarray([[3, 4]]), jnp.asarray([[-1, 0]])
  path, n, next_token = accept_tree_greedy(jnp.asarray([[3, 4, 6]]), tokens, parents)
  assert path.tolist() == [[0, 1]] and n.tolist() == [2] and next_token.tolist() == [6]
  with pytest.raises(ValueError, match="3 contexts"):
    accept_tree_greedy(jnp.asarray([[3, 4]]), tokens, parents)
