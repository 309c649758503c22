"""A tiny benchmark run on a random model: every method, both temperatures, phase-split, all three outputs."""

import json

import ml_collections
import pytest

from configs import bench_cpu
from specjax import ModelConfig, init_model
from specjax.benchmark import REQUIRED_KEYS, report, run_benchmark, validate_config

TINY = ModelConfig(vocab_size=256, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=256,
                   eos_token_ids=(255,))


def tiny_config(tmp_path, **changes) -> ml_collections.ConfigDict:
  c = bench_cpu.get_config()
  c.model = "random"
  c.ks = (2,)
  c.batch_sizes = (1,)
  c.temperatures = (0.0, 1.0)
  c.sweep = "axes"
  c.phase_split_batch_sizes = (1,)
  c.prompts_per_category = 2
  c.max_new_tokens = 6
  c.max_prompt_tokens = 24
  c.prompt_bucket = 32
  c.draft_layers = 1
  c.layer_skip_layers = 1
  c.methods = ("ar", "draft_model", "prompt_lookup", "layer_skip", "medusa", "feature_head")
  c.drafter_dirs.medusa = c.drafter_dirs.feature_head = "untrained"
  c.paired_with_ar = True
  c.paired_verify_calls = 2
  c.compilation_cache_dir = ""
  c.output_dir = str(tmp_path)
  c.update(changes)
  return c


def test_tiny_run_writes_results_report_and_plots(tmp_path):
  config = tiny_config(tmp_path)
  records = run_benchmark(config, target=init_model(TINY), progress=False)
  report.write_outputs(records, validate_config(config), config.output_dir)
  with open(tmp_path / "results.json") as f:
    results = json.load(f)
  assert isinstance(results, list) and results
  for record in results:
    assert set(REQUIRED_KEYS) <= set(record), set(REQUIRED_KEYS) - set(record)
    assert record["machine"]["cpu_count"] and record["devices"]
  methods = {(r["method"], r["temperature"]) for r in results}
  assert methods == {(m, t) for m in ("ar", "draft_model", "prompt_lookup", "layer_skip", "medusa", "feature_head")
                     for t in (0.0, 1.0)}
  assert {r["category"] for r in results} == {"code", "prose", "structured", "long_context"}
  for r in results:
    if r["method"] == "ar":
      assert r["speedup_vs_ar"] == pytest.approx(1.0) and r["tokens_per_round"] == 1.0
      assert "paired_speedup_vs_ar" not in r
    elif r["k"] == "auto":  # the adaptive policy: K per round from the calibrated costs, no phase split
      assert 1.0 <= r["tokens_per_round"] <= max(r["auto_ks"]) + 1 and 0.0 <= r["mean_k"] <= max(r["auto_ks"])
      assert len(r["auto_round_cost"]) == len(r["auto_ks"]) + 1 and r["auto_round_cost"][0] == 1.0
    else:
      assert 1.0 <= r["tokens_per_round"] <= r["k"] + 1 and 0.0 <= r["acceptance_rate"] <= 1.0
    if r["method"] != "ar":  # an autoregressive call on the same inputs beside each of the cell's calls
      assert r["paired_calls"] == r["n_calls"] and r["paired_speedup_vs_ar"] > 0
    if r["k"] == "auto":
      assert r["predicted_speedup"] is None and "adaptive" in r["theory_gap"]
    else:
      assert r["verify_ms_per_round"] > 0 and r["phase_split_matches_fused"]
    if r["method"] != "ar" and r["k"] != "auto":
      assert r["predicted_speedup"] > 0
    if r["method"] != "ar" and r["temperature"] == 0.0:
      assert r["greedy_match_ar"] == 1.0  # greedy speculative decoding reproduces the target's greedy tokens
    if r["method"] != "ar" and r["temperature"] == 1.0:
      assert isinstance(r["quality"]["agrees_with_ar"], bool)
  paired = results[0]["paired_verify_cost"]  # per (phase-split batch size, K, category)
  assert [(p["batch_size"], p["k"], p["category"]) for p in paired] == [
      (1, 2, c) for c in ("code", "prose", "structured", "long_context")]
  assert all(p["ratio"] > 0 and p["filled"] > 0 for p in paired)
  text = (tmp_path / "report.md").read_text()
  assert "Verification cost" in text and "prompts per category 2;" in text
  (tmp_path / "all").mkdir()
  every = report.write_report(records, dict(validate_config(config), prompts_per_category=0), str(tmp_path / "all"))
  assert "prompts per category all;" in every
  assert "speedup by category x K" in text and "Theory beside measurement" in text
  assert "Adaptive K" in text and "paired median" in text and "stops paying" in text and "Drafters compared" in text
  for name in ("speedup_vs_k.png", "throughput_vs_batch.png", "latency_vs_batch.png"):
    assert (tmp_path / name).stat().st_size > 1000


@pytest.mark.parametrize("change, message", [
    (dict(methods=("ar", "eagle9")), "unknown method"),
    (dict(categories=("poetry",)), "unknown or no categories"),
    (dict(ks=(0,)), "config.ks"),
    (dict(batch_sizes=()), "config.batch_sizes"),
    (dict(phase_split_batch_sizes=(4,)), "phase_split_batch_sizes"),
    (dict(methods=("ar", "prompt_lookup"), phase_split_methods=("draft_model",)), "phase_split_methods"),
    (dict(drafter_dirs=dict(eagle9="x")), "drafter_dirs names unknown"),
    (dict(ks=(1, 99)), "config.ks"),
    (dict(prompts_per_category=99), "has only"),
    (dict(temperatures=(-1.0,)), "temperatures"),
    (dict(sweep="diagonal"), "sweep"),
    (dict(peers="vllm"), "peers"),
    (dict(peers="hf"), "needs a model file"),
    (dict(tree_nodes=(200,)), "tree_nodes / tree_depth / tree_top_k"),
    (dict(tree_branching="beam"), "tree_branching"),
    (dict(tree_kind="sequoia"), "tree_kind"),
    (dict(tree_nodes=(4,), tree_kind="tuned", prompts_per_category=0), "none is left"),
    (dict(tree_nodes=(4,), tree_kind="tuned", tree_calibration_prompts=99), "has only"),
    (dict(tree_nodes=(4,), tree_kind="tuned", tree_calibration_prompts=0), "tree_calibration_prompts"),
    (dict(tree_nodes=(4,), tree_kind="fastest", prompts_per_category=0), "'fastest' calibrates"),
    (dict(methods=("ar", "medusa"), tree_methods=("prompt_lookup",)), "tree_methods"),
    (dict(paired_reference="medusa"), "'METHOD@K'"),
    (dict(paired_reference="eagle9@2"), "not a drafter method"),
    (dict(paired_reference="medusa@3"), "not in config.ks"),
])
def test_bad_settings_fail_before_model_work(tmp_path, change, message):
  with pytest.raises(ValueError, match=message):
    run_benchmark(tiny_config(tmp_path, **change), target=None, progress=False)  # target=None: nothing is loaded


def test_prompt_too_long_for_the_model_is_a_clear_error(tmp_path):
  config = tiny_config(tmp_path, max_prompt_tokens=0)
  with pytest.raises(ValueError, match="max_seq_len"):
    run_benchmark(config, target=init_model(TINY.replace(max_seq_len=64)), progress=False)


def test_a_quantized_target(tmp_path):
  """config.weights runs the target itself on quantized weights (autoregressive and speculative), and says so."""
  config = tiny_config(tmp_path, methods=("ar", "quantized:int8"), temperatures=(0.0,), weights="int8",
                       categories=("code",), paired_with_ar=False, paired_verify_calls=0, phase_split_batch_sizes=())
  records = run_benchmark(config, target=init_model(TINY), progress=False)
  assert {r["method"] for r in records} == {"ar", "quantized:int8"}
  assert all(r["target_weights"] == "int8" and r["tokens_per_round"] >= 1.0 for r in records)


def test_tree_cells_beside_the_chains(tmp_path):
  """config.tree_nodes adds a DynamicTree cell per N and tree method at the first batch size, with per-depth
  acceptance and nodes per accepted token, and the paired cost of verifying N tree nodes against a step."""
  config = tiny_config(tmp_path, methods=("ar", "prompt_lookup", "medusa"), categories=("code",), tree_nodes=(4, 6),
                       tree_depth=3, tree_top_k=2, tree_methods=("medusa",))
  records = run_benchmark(config, target=init_model(TINY), progress=False)
  report.write_outputs(records, validate_config(config), config.output_dir)
  trees = [r for r in records if str(r["k"]).startswith("tree:")]
  assert {(r["method"], r["k"], r["temperature"]) for r in trees} == {
      ("medusa", f"tree:{n}", t) for n in (4, 6) for t in (0.0, 1.0)}
  for r in trees:
    assert r["tree"]["kind"] == "DynamicTree" and r["mean_k"] == r["tree"]["nodes"] == int(r["k"][5:])
    assert 1.0 <= r["tokens_per_round"] <= 4 and len(r["acceptance_per_depth"]) == 3
    assert r["verified_per_accepted"] is None or r["verified_per_accepted"] >= 1.0
    assert "dynamic tree" in r["theory_gap"] and r["paired_speedup_vs_ar"] > 0
    if r["temperature"] == 0.0:
      assert r["greedy_match_ar"] == 1.0
  costs = records[0]["paired_tree_verify_cost"]
  assert [c["k"] for c in costs] == [4, 6] and all(c["ratio"] > 0 and c["tree_paths"] for c in costs)
  assert "Token trees" in (tmp_path / "report.md").read_text()


def test_tuned_tree_cells(tmp_path):
  """config.tree_kind "tuned": each tree method's static tree, tuned on the calibration prompts after the measured
  ones, exact under greedy decoding, with the table it was tuned on in the record."""
  config = tiny_config(tmp_path, methods=("ar", "medusa"), categories=("code", "prose"), tree_nodes=(5,),
                       tree_kind="tuned", tree_depth=3, tree_top_k=2, temperatures=(0.0,), paired_verify_calls=0,
                       prompts_per_category=1, tree_calibration_prompts=2)
  records = run_benchmark(config, target=init_model(TINY), progress=False)
  trees = [r for r in records if r["k"] == "tree:5"]
  assert len(trees) == 2
  for r in trees:
    assert r["tree"]["kind"] == "StaticTree" and r["tree"]["nodes"] == 5 and r["tree"]["depth"] <= 3
    table = r["tree_calibration"]["acceptance_by_depth_and_rank"]
    assert len(table) == 3 and r["tree_calibration"]["skipped_per_category"] == 1
    assert r["greedy_match_ar"] == 1.0 and "this static tree" in r["theory_gap"]
    assert len(r["acceptance_by_depth_and_rank"]) == r["tree"]["depth"]
  report.write_outputs(records, validate_config(config), config.output_dir)
  assert "(tuned, " in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("per_category", [False, True])
def test_fastest_tree_cells(tmp_path, per_category):
  """config.tree_kind "fastest": each tree method's tree (or chain) of at most N nodes with the most expected tokens
  per round cost measured in the run, over every category's calibration prompts or (tree_per_category) each
  category's own; the record holds the costs and acceptance, which reproduce the choice."""
  from specjax.benchmark import round_costs, theory
  from specjax.trees import StaticTree
  from specjax.trees.fastest import MeasuredRoundCost, ranked_choices
  config = tiny_config(tmp_path, methods=("ar", "draft_model"), categories=("code", "prose"), tree_nodes=(4,),
                       tree_kind="fastest", tree_depth=3, tree_top_k=2, temperatures=(0.0,), paired_verify_calls=2,
                       prompts_per_category=1, tree_calibration_prompts=1, tree_per_category=per_category)
  records = run_benchmark(config, target=init_model(TINY), progress=False)
  trees = [r for r in records if r["k"] == "tree:4"]
  assert len(trees) == 2
  for r in trees:
    assert r["tree_calibration"]["categories"] == ([r["category"]] if per_category else ["code", "prose"])
    fastest = r["tree_calibration"]["fastest"]
    assert r["tree"]["kind"] == "StaticTree" and r["tree"]["paths"] == fastest["chosen"]["paths"]
    assert r["tree"]["nodes"] <= 4 and r["tree"]["depth"] <= 3 and r["greedy_match_ar"] == 1.0
    assert sorted(map(int, fastest["verify_by_positions"])) == [1, 2, 3, 4, 5]
    assert fastest["draft_step"] > 0 and fastest["overhead_steps"] >= 0 and fastest["best_chain"]["chain"]
    verify = round_costs.never_cheaper({int(n): r for n, r in fastest["verify_by_positions"].items()})
    cost = MeasuredRoundCost(verify, fastest["draft_step"], fastest["draft_by_width"], fastest["overhead_steps"])
    rates = theory.measured_rates(r["tree_calibration"]["acceptance_by_depth_and_rank"])
    best = ranked_choices(rates, cost, range(1, 5), 3)[0]
    assert best.tree == StaticTree(tuple(map(tuple, fastest["chosen"]["paths"])))
    assert fastest["chosen"]["speedup_over_ar_steps"] >= fastest["best_chain"]["speedup_over_ar_steps"]
  report.write_outputs(records, validate_config(config), config.output_dir)
  assert "(fastest, " in (tmp_path / "report.md").read_text()


def test_cells_paired_against_a_reference_chain(tmp_path):
  """config.paired_reference times that chain cell beside every other drafter cell, on the same inputs, in turn
  with the autoregressive partner: each such cell gets its speedup over the reference, and the report a table."""
  config = tiny_config(tmp_path, methods=("ar", "prompt_lookup", "medusa"), categories=("code",), ks=(2, 3),
                       temperatures=(0.0,), tree_nodes=(4,), tree_depth=2, tree_top_k=2, tree_methods=("medusa",),
                       paired_verify_calls=0, repeats=2, paired_reference="prompt_lookup@2")
  records = run_benchmark(config, target=init_model(TINY), progress=False)
  paired = {(r["method"], r["k"]): r.get("paired_vs_reference") for r in records}
  assert paired[("ar", 0)] is None and paired[("prompt_lookup", 2)] is None  # the reference itself: its own cell
  for key in (("prompt_lookup", 3), ("medusa", 2), ("medusa", 3), ("medusa", "tree:4")):
    p = paired[key]
    assert p["pairs"] == 2 * config.prompts_per_category and p["speedup"] > 0, key
  assert all(r["greedy_match_ar"] == 1.0 for r in records if r["method"] != "ar")
  report.write_outputs(records, validate_config(config), config.output_dir)
  assert "## Paired against prompt_lookup K=2" in (tmp_path / "report.md").read_text()
