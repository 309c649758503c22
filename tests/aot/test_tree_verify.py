"""The tree verify program for a TPU topology (tiny pair, v4:2x2x1): it compiles, its cost grows with the node
budget N and depends on N rather than the tree's shape; the tree prediction against hand-computed cases."""

import dataclasses
import importlib.util

import pytest

from aot.tiny_config import with_changes as _tiny_config
from specjax.aot import analysis, programs, report, trees
from specjax.aot.predict import spec_speedup
from specjax.aot.run import run_aot
from specjax.aot.settings import TREE_SIBLING_RATES, settings_from_config
from specjax.benchmark import theory
from specjax.sampling import SamplingParams
from specjax.trees.static import StaticTree

needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="needs libtpu: pip install -e '.[tpu]'")


@pytest.fixture(scope="module")
def result():
  return run_aot(settings_from_config(_tiny_config(), tree_nodes=(16, 4)), log=lambda _: None)


@needs_libtpu
def test_tree_verify_compiles_and_its_cost_grows_with_n(result):
  four, sixteen = result["programs"]["tree_verify_n4"], result["programs"]["tree_verify_n16"]
  ar, chain = result["programs"]["ar_step"], result["programs"]["verify_k4"]
  assert (four["positions"], sixteen["positions"]) == (5, 17) and four["fits_hbm"] and sixteen["fits_hbm"]
  assert sixteen["model_flops"] == pytest.approx(17 / 5 * four["model_flops"])
  assert sixteen["flops"] > four["flops"] > ar["flops"]
  assert sixteen["roofline_ms"] > four["roofline_ms"] > ar["roofline_ms"]
  assert four["weight_bytes"] == chain["weight_bytes"] and four["collectives"]["all-reduce"]["count"] >= 4
  rows = result["trees"]["rows"]
  assert [r["n"] for r in rows] == [4, 16] and rows[1]["verify_ratio"] > rows[0]["verify_ratio"] > 1.0
  # The same positions as the chain's compiled K=4 verify, and a cost within 10% of it.
  assert rows[0]["chain_interpolated"] is False and rows[0]["chain_verify_ms"] == pytest.approx(chain["roofline_ms"])
  assert rows[0]["verify_ms"] == pytest.approx(chain["roofline_ms"], rel=0.1)
  assert result["trees"]["branching"] == "sample" and result["trees"]["sibling_rates"] == list(TREE_SIBLING_RATES)
  for row in rows:
    assert row["compiled_paths"] == [list(p) for p in StaticTree.balanced(row["n"]).paths]
    assert row["best_chain_k"] <= row["n"]
    for entry in row["by_sibling_rate"].values():
      assert entry["best"]["speedup"] >= entry["balanced"]["speedup"] - 1e-9  # the balanced tree is one candidate
      assert entry["vs_best_chain"] == pytest.approx(entry["best"]["speedup"] / row["best_chain_speedup"])
  markdown = report.markdown(result)
  assert "## Token trees (branching 'sample'" in markdown and "| 16 | 1 |" in markdown


@needs_libtpu
def test_tree_cost_depends_on_the_node_budget_not_the_shape():
  from specjax.aot.topology import get_topology, topology_mesh
  settings = settings_from_config(_tiny_config())
  topology = get_topology(settings.topology)
  mesh = topology_mesh(topology, 1, 4)
  greedy = SamplingParams(temperature=0.0)
  figures = {}
  for tree in (StaticTree.chain(4), StaticTree.balanced(4), StaticTree.balanced(4, width=4)):
    program = programs.tree_verify_program(mesh, settings.target, 1, settings.cache_len, tree, greedy)
    assert len(program.args) == 5  # greedy reads no q
    figures[tree.paths] = analysis.analyse(program, program.lower().compile(), topology.chip, settings.context_len)
  costs = [f.roofline_ms for f in figures.values()]
  assert max(costs) == pytest.approx(min(costs), rel=0.02)


def _step(positions, roofline_ms):
  return analysis.ProgramFigures(
      name="s", role="draft", positions=positions, k=0, argument_bytes=1000, temp_bytes=0, output_bytes=150,
      alias_bytes=50, weight_bytes=900, cache_bytes=80, kv_read_bytes=40, flops=1e6, model_flops=1e6,
      xla_bytes_accessed=5e3, roofline_bytes=1000.0,
      collectives={"all-reduce": {"count": 2, "result_bytes": 10, "moved_bytes": 15.0}},
      compute_ms=0.01, memory_ms=roofline_ms, comm_ms=0.0, hbm_bytes=10**6)


def test_a_draft_call_over_a_level_reads_the_weights_once():
  wide = analysis.widen(_step(1, 2.0), 4)
  assert (wide.positions, wide.interpolated) == (4, True)
  assert wide.flops == 4e6 and wide.compute_ms == pytest.approx(0.04)
  assert wide.roofline_bytes == 1000 + 3 * 100 and wide.memory_ms == pytest.approx(2.6)  # 3 more new outputs
  assert wide.collectives["all-reduce"] == {"count": 2, "result_bytes": 40, "moved_bytes": 60.0}
  with pytest.raises(ValueError, match="1-position step"):
    analysis.widen(wide, 2)


def test_tree_round_cost_and_speedup_by_hand():
  tree = StaticTree(((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)))
  # The root's context, then depth 1's two nodes (both have children), then depth 2's one node with a child.
  assert trees.draft_calls(tree) == (1, 2, 1)
  assert trees.draft_calls(StaticTree.chain(4)) == (1, 1, 1, 1)
  draft = dataclasses.replace(_step(1, 1.0), output_bytes=50)  # no new outputs: every call costs 1 ms
  assert trees.tree_round_ms(tree, draft, 12.0) == pytest.approx(3.0 + 12.0)
  accept = (0.6, 0.3)
  expected = 1 + 0.6 + 0.3 + 0.36 + 0.18 + 0.18 + 0.216
  assert trees.tree_speedup(tree, accept, 10.0, draft, 12.0) == pytest.approx(10 * expected / 15)
  # A chain is the chain's prediction: K draft steps and the verify, E(alpha, K) tokens.
  assert trees.tree_speedup(StaticTree.chain(4), (0.8,), 10.0, draft, 12.0) == pytest.approx(
      spec_speedup(0.8, 4, 10.0, 1.0, 12.0))
  best, speedup = trees.best_static_tree(4, (0.6, 0.3, 0.1), 10.0, draft, 12.0, "top_k")
  assert speedup == pytest.approx(trees.tree_speedup(best, (0.6, 0.3, 0.1), 10.0, draft, 12.0))
  assert speedup >= max(trees.tree_speedup(theory.best_tree(4, (0.6, 0.3, 0.1), d), (0.6, 0.3, 0.1), 10.0, draft,
                                           12.0) for d in range(2, 5)) - 1e-12


def test_tree_settings():
  settings = settings_from_config(_tiny_config(tree_nodes=(8, 4, 8), tree_sibling_rates=(0.5,)))
  assert settings.tree_nodes == (4, 8) and settings.tree_sibling_rates == (0.5,)
  assert settings_from_config(_tiny_config()).tree_nodes == ()
  assert settings_from_config(_tiny_config(tree_nodes=(8,)), tree_nodes=()).tree_nodes == ()
  with pytest.raises(ValueError, match="tree_nodes must be a non-empty list of ints >= 1"):
    settings_from_config(_tiny_config(), tree_nodes=(0,))
  with pytest.raises(ValueError, match=r"tree_sibling_rates must be a non-empty list in \[0, 1\]"):
    settings_from_config(_tiny_config(tree_sibling_rates=(1.5,)))
