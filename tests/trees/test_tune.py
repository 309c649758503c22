"""Static trees tuned to a drafter (`specjax.trees.tune`): the comb that measures acceptance per depth and rank,
and the best static tree at what it measured."""

import pytest

import specjax
from specjax import drafters
from specjax.benchmark import theory
from specjax.drafters.medusa import MedusaConfig, MedusaHeads
from specjax.trees import StaticTree, tune
from test_rejection import TARGET_CONFIG

GREEDY = specjax.SamplingParams(temperature=0.0)
PROMPTS = [[1, 2, 3, 4], [5, 2, 6], [7, 7, 1, 3, 0]]


@pytest.fixture(scope="module")
def target():
  return specjax.init_model(TARGET_CONFIG, seed=3)


def test_comb():
  assert tune.comb(3, 2).paths == ((0,), (1,), (0, 0), (0, 1), (0, 0, 0), (0, 0, 1))
  assert tune.comb(4, 1) == StaticTree.chain(4)
  for depth, width in ((0, 2), (2, 0), (True, 2)):
    with pytest.raises(ValueError, match="a comb needs"):
      tune.comb(depth, width)


def test_a_perfect_draft_tunes_to_the_chain(target):
  table = tune.measure_acceptance(target, drafters.DraftModel(target), PROMPTS, depth=3, width=3, max_new_tokens=12,
                                  sampling=GREEDY, stop_at_eos=False)
  assert table == [[1.0, 0.0, 0.0]] * 3
  assert tune.tuned_tree(4, table, 4) == StaticTree.chain(4)


def test_a_tuned_tree_expects_the_most_and_decodes_exactly(target):
  """An imperfect draft (another random model): the tuned tree expects at least as many tokens at the measured
  rates as the balanced tree and the chain of its depth, and greedy decoding with it is the target's own."""
  draft = drafters.DraftModel(specjax.init_model(TARGET_CONFIG, seed=11))
  table = tune.measure_acceptance(target, draft, PROMPTS, depth=3, width=3, max_new_tokens=16, sampling=GREEDY,
                                  stop_at_eos=False)
  assert len(table) == 3 and all(len(row) == 3 for row in table)
  assert 0.0 < table[0][0] < 1.0 and table[0][1] is not None and sum(table[0]) <= 1.0
  tree = tune.tuned_tree(6, table, 3)
  rates = theory.measured_rates(table)
  assert tree.n_nodes == 6 and tree.max_depth <= 3
  for other in (StaticTree.balanced(6, 3), StaticTree.balanced(6, 2), StaticTree.chain(3)):
    assert theory.tree_expected_tokens(tree, rates) >= theory.tree_expected_tokens(other, rates) - 1e-12
  ar = specjax.generate(target, PROMPTS, max_new_tokens=16, sampling=GREEDY, stop_at_eos=False)
  spec = specjax.generate(target, PROMPTS, max_new_tokens=16, sampling=GREEDY, stop_at_eos=False, drafter=draft,
                          tree=tree)
  assert spec.tokens == ar.tokens


def test_calibration_at_the_decoding_batch_averages_each_calls_table(target):
  """batch_size=1: one call a prompt, each table entry the mean over the calls that measured it."""
  draft = drafters.DraftModel(specjax.init_model(TARGET_CONFIG, seed=11))
  settings = dict(depth=2, width=2, max_new_tokens=12, sampling=GREEDY, stop_at_eos=False)
  singles = [tune.measure_acceptance(target, draft, [prompt], **settings) for prompt in PROMPTS]
  assert tune.measure_acceptance(target, draft, PROMPTS, batch_size=1, **settings) == tune.mean_tables(singles)
  assert tune.mean_tables([[[1.0, None]], [[0.5, None]], [[None, 0.25]]]) == [[0.75, 0.25]]
  assert tune.mean_tables([[[None, None]]]) == [[None, None]]


def test_a_comb_deeper_than_the_drafter_is_refused(target):
  heads = MedusaHeads.create(target, MedusaConfig.for_target(target.config, n_heads=2))
  with pytest.raises(ValueError, match="MedusaHeads drafts at most 2"):
    tune.measure_acceptance(target, heads, PROMPTS, depth=3, width=2, max_new_tokens=4)
