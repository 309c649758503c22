"""Which cells a config runs (no model work)."""

import pytest

from configs import bench_cpu, bench_smoke
from specjax.benchmark.plan import SETTINGS, Cell, TunedTree, plan, validate_config


def _cpu():
  """The full config with its trained heads replaced by untrained ones (no training output here)."""
  c = bench_cpu.get_config()
  c.methods = ("ar", "draft_model", "prompt_lookup", "layer_skip", "medusa", "feature_head")
  for method in ("medusa", "feature_head", "block_drafter"):
    c.drafter_dirs[method] = "untrained"
  return c


def test_grid_runs_every_k_at_every_batch_size():
  c = validate_config(_cpu())
  cells = plan(c)
  assert len([x for x in cells if x.method == "ar"]) == 5 * 2
  assert len([x for x in cells if x.method == "draft_model"]) == (6 + 1) * 5 * 2   # six K and "auto"
  assert Cell("prompt_lookup", "auto", 16, 1.0) in cells


def test_axes_sweep_runs_auto_at_the_first_batch_size_only():
  c = _cpu()
  c.sweep = "axes"
  autos = [x for x in plan(validate_config(c)) if x.k == "auto"]
  assert {x.batch_size for x in autos} == {1} and len(autos) == 5 * 2


def test_smoke_sweep_runs_every_method_and_varies_k_and_batch_with_the_first():
  cells = plan(validate_config(bench_smoke.get_config()))
  others = ("prompt_lookup", "layer_skip", "medusa", "feature_head")
  assert set(cells) == {Cell("ar", 0, 1, 0.0), Cell("ar", 0, 2, 0.0)} | {
      Cell("draft_model", k, b, 0.0) for k, b in ((2, 1), (4, 2))} | {Cell(m, 2, 1, 0.0) for m in others}


def test_k_above_a_methods_max_k_is_skipped():
  c = validate_config(_cpu())
  cells = plan(c, {"medusa": 4})
  assert max(x.k for x in cells if x.method == "medusa" and x.k != "auto") == 4
  assert max(x.k for x in cells if x.method == "draft_model" and x.k != "auto") == 8


def test_a_dynamic_tree_is_grown_as_deep_as_each_drafter_goes_and_a_deeper_static_tree_skipped():
  from configs import bench_trees
  from specjax.trees import DynamicTree
  c = bench_trees.get_config()
  c.methods = ("ar", "medusa", "feature_head")
  c.drafter_dirs.medusa = c.drafter_dirs.feature_head = "untrained"
  c.tree_depth = 8
  trees = {x.method: x.tree for x in plan(validate_config(c), {"medusa": 4}, {"medusa": 4}) if x.tree is not None}
  assert trees == {"medusa": DynamicTree(16, 4, 4), "feature_head": DynamicTree(16, 8, 4)}
  c.tree_kind = "static"
  trees = {x.method: x.tree for x in plan(validate_config(c), {"medusa": 4}, {"medusa": 2}) if x.tree is not None}
  assert set(trees) == {"feature_head"} and trees["feature_head"].max_depth > 2
  c.tree_kind = "tuned"   # still to be tuned per method, as deep as each drafter goes
  trees = {x.method: x.tree for x in plan(validate_config(c), {"medusa": 4}, {"medusa": 4}) if x.tree is not None}
  assert trees == {"medusa": TunedTree(16, 4, 4, "top_k"), "feature_head": TunedTree(16, 8, 4, "top_k")}
  trees = {x.method: x.tree for x in plan(validate_config(c), {"medusa": 4}, {"medusa": 1}) if x.tree is not None}
  assert set(trees) == {"feature_head"}   # 16 nodes do not fit 1 level of 4 ranks
  c.tree_kind = "fastest"
  trees = {x.method: x.tree for x in plan(validate_config(c), {"medusa": 4}, {"medusa": 4}) if x.tree is not None}
  assert trees == {"medusa": TunedTree(16, 4, 4, "top_k", True), "feature_head": TunedTree(16, 8, 4, "top_k", True)}
  settings = dict(c.to_dict(), tree_per_category="yes")   # a ConfigDict keeps its types; a plain dict need not
  with pytest.raises(ValueError, match="tree_per_category must be True or False"):
    validate_config(settings)


def test_heads_need_a_trained_directory(tmp_path):
  c = _cpu()
  c.methods = ("medusa",)
  c.drafter_dirs.medusa = ""
  with pytest.raises(ValueError, match="drafter_dirs.medusa"):
    validate_config(c)
  c.drafter_dirs.medusa = str(tmp_path / "missing")
  with pytest.raises(ValueError, match="train_draft.py"):
    validate_config(c)
  c.drafter_dirs.medusa = "untrained"
  assert validate_config(c)["methods"] == ("ar", "medusa")


def test_ar_baseline_is_always_added():
  c = _cpu()
  c.methods = ("prompt_lookup",)
  assert validate_config(c)["methods"] == ("ar", "prompt_lookup")


def test_policy_config_runs_only_autoregressive_and_adaptive_cells():
  from configs import bench_policy
  cells = plan(validate_config(bench_policy.get_config()))
  assert {x.k for x in cells} == {0, "auto"} and {x.batch_size for x in cells} == {1, 4, 16}
  assert len(cells) == 2 * 3 * 2  # (AR, auto) x batch sizes x temperatures


def test_no_fixed_k_needs_the_adaptive_cells():
  c = _cpu()
  c.ks, c.auto_ks = (), ()
  with pytest.raises(ValueError, match="config.ks"):
    validate_config(c)


def test_the_base_config_sets_every_setting_and_a_missing_one_is_named():
  c = bench_cpu.get_config()
  assert set(c.keys()) == set(SETTINGS)
  del c["ks"]
  with pytest.raises(ValueError, match=r"missing \['ks'\]"):
    validate_config(c)


def test_every_registered_drafter_is_a_method():
  from specjax.drafters import registry
  c = _cpu()
  c.methods = registry.names()
  assert validate_config(c)["methods"] == ("ar",) + registry.names()


def test_a_method_with_its_own_source():
  """NAME:SOURCE runs one variant of a registered method (both quantized schemes side by side); an unknown name
  or an empty source is refused."""
  from configs import bench_quantized
  from specjax.benchmark.plan import split_method
  c = validate_config(bench_quantized.get_config())
  assert c["methods"] == ("ar", "quantized:q4", "quantized:int8")
  assert {x.method for x in plan(c)} == {"ar", "quantized:q4", "quantized:int8"}
  assert split_method("quantized:int8") == ("quantized", "int8") and split_method("ar") == ("ar", None)
  for bad in ("quantised:q4", "quantized:"):
    config = bench_quantized.get_config()
    config.methods = ("ar", bad)
    with pytest.raises(ValueError, match="unknown method"):
      validate_config(config)


def test_the_llama_cpp_peer_needs_its_binaries(tmp_path):
  c = bench_cpu.get_config()
  c.peers = "llama_cpp"
  c.llama_cpp_dir = str(tmp_path)
  with pytest.raises(ValueError, match=r"llama_cpp_dir with llama-completion.*build_llama_cpp\.sh"):
    validate_config(c)


def test_the_targets_weights_are_checked():
  c = _cpu()
  c.weights = "q4"
  assert validate_config(c)["weights"] == "q4"
  c.weights = "q3"
  with pytest.raises(ValueError, match=r"config.weights: weights must be one of \['float', 'int8', 'q4'\], got 'q3'"):
    validate_config(c)
