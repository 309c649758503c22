"""`run_benchmark(config)`: every requested (method, K, batch size, temperature) cell on every category, in one
process, with the autoregressive baseline measured in the same run; returns the result records.

Shapes are shared to bound compilation: one cache size for the whole run and one prompt bucket per category
(`config.prompt_bucket` raises every bucket to at least that size, so a run can compile one program per cell).
Each program's first call compiles, generates one token and is not timed (its time is reported as `compile_s`).
"""

import dataclasses
import itertools
import os
import platform

import jax
import numpy as np

from specjax.benchmark import bandwidth, metrics, placement, quality, tasks, theory, tree_cells
from specjax.benchmark.phases import run_phase_split
from specjax.benchmark.plan import Cell, plan, split_method, validate_config
from specjax.benchmark.reference import is_reference
from specjax.benchmark.verify_cost import paired_verify_cost
from specjax import engine, host
from specjax.cache import cache_size
from specjax.calibration import Calibration
from specjax.drafters import registry
from specjax.kernels import packed
from specjax.policy import SpeculationPolicy
from specjax.quantize import quantize_model
from specjax.trees import StaticTree

REQUIRED_KEYS = ("method", "k", "batch_size", "category", "temperature", "tokens_per_round", "acceptance_rate",
                 "draft_ms_per_round", "verify_ms_per_round", "accept_ms_per_round", "throughput_tok_s",
                 "latency_ms_per_token_p50", "latency_ms_per_token_p90", "speedup_vs_ar", "predicted_speedup",
                 "quality", "machine", "jax_version", "devices")


def machine_info() -> dict:
  return {"machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                      "cpu_count": os.cpu_count(), "python": platform.python_version()},
          "jax_version": jax.__version__, "devices": [str(d) for d in jax.devices()]}


def _load_target(c: dict, given=None):
  """The target on config.weights: `given` (quantized here unless float) or config.model."""
  if given is None and c["model"] != "random":
    from specjax.checkpoints import load_model
    return load_model(c["model"], dtype=c["dtype"] or None, weights=c["weights"])  # a GGUF's own blocks kept
  if given is None:
    from specjax import ModelConfig, init_model
    given = init_model(ModelConfig(**dict(c["random_model"])), seed=c["seed"])
  return given if c["weights"] == "float" else quantize_model(given, c["weights"])


def _drafter(method: str, target, c: dict):
  """The method's drafter (None for "ar"), built by the registry from its source: NAME:SOURCE's, else
  config.drafter_dirs[NAME] ("": the method's default, e.g. draft_model's first draft_layers layers; "untrained":
  a freshly initialised head), and the config."""
  name, source = split_method(method)
  if source is None:
    source = dict(c["drafter_dirs"] or {}).get(name, "") or ""
  return registry.build(name, target, os.path.expanduser(source), c)


def _encode(target, text: str, c: dict) -> list[int]:
  if target.tokenizer is None:
    return tasks.byte_ids(text, target.config.vocab_size, c["max_prompt_tokens"] or 256)
  ids = target.tokenizer.apply_chat_template(text) if c["chat"] else target.tokenizer.encode(text)
  return ids[-c["max_prompt_tokens"]:] if c["max_prompt_tokens"] else ids


def _groups(n_prompts: int, batch: int) -> list[list[int]]:
  """Prompt indices per call: prompts cycled so that every call is a full batch."""
  rows = list(itertools.islice(itertools.cycle(range(n_prompts)), -(-n_prompts // batch) * batch))
  return [rows[i:i + batch] for i in range(0, len(rows), batch)]


def run_benchmark(config, target=None, progress: bool = True) -> list[dict]:
  """Runs the benchmark (validated first) and returns its records; `target` overrides `config.model`."""
  from tqdm import tqdm
  c = validate_config(config)
  peer_runner = None
  if c["peers"] == "hf":
    from specjax.benchmark import peers
    peer_runner = peers.available(c)
  elif c["peers"] == "llama_cpp":
    from specjax.benchmark.llama_cpp import LlamaCppPeer
    from specjax.benchmark.peers import gguf_path
    peer_runner = LlamaCppPeer(c, gguf_path(c["model"]))
  target = _load_target(c, target)
  suite = {cat: tasks.select(cat, c["prompts_per_category"]) for cat in c["categories"]}
  prompt_ids = {cat: [_encode(target, p["prompt"], c) for p in suite[cat]] for cat in c["categories"]}
  buckets = {cat: max(c["prompt_bucket"], host.prompt_bucket(max(map(len, ids)))) for cat, ids in prompt_ids.items()}
  longest = max(max(map(len, ids)) for ids in prompt_ids.values())
  drafters = {m: _drafter(m, target, c) for m in c["methods"]}
  # Before any model work, the checks every call's host.prepare makes, at the run's longest prompt and largest K.
  tree_slots = tuple(tree.slots for tree in c["trees"])
  needed = max(host.check_lengths(target, d, longest, c["max_new_tokens"],
                                  max(c["ks"] + c["auto_ks"] + tree_slots) if d else 0) for d in drafters.values())
  size = cache_size(max(max(buckets.values()), needed))
  cells = plan(c, {m: d.max_k for m, d in drafters.items() if d is not None},
               {m: d.max_tree_depth for m, d in drafters.items() if d is not None})
  units, tuning = tree_cells.tune_trees(cells, target, drafters, c, lambda text: _encode(target, text, c), progress)
  info = machine_info()
  info["copy_bandwidth_gbs"] = bandwidth.copy_bandwidth_gbs()
  info["target_weights"] = c["weights"]
  info["packed_min_rows"] = packed.view_min_rows(packed.packed_params(target))  # this CPU's choice of kernel
  if c["paired_verify_calls"]:
    info["paired_verify_cost"] = [
        dict(paired_verify_cost(target, batch=b, k=k, filled=int(np.mean([len(p) for p in prompt_ids[cat]]))
                                + c["max_new_tokens"] // 2, cache_size=size, calls=c["paired_verify_calls"]),
             category=cat)
        for b in c["phase_split_batch_sizes"] for k in c["ks"] for cat in c["categories"]]
    if c["tree_nodes"] and c["phase_split_batch_sizes"]:  # a balanced tree of each N, as wide as the trees' top_k
      filled = int(np.mean([len(p) for ids in prompt_ids.values() for p in ids])) + c["max_new_tokens"] // 2
      info["paired_tree_verify_cost"] = [
          paired_verify_cost(target, batch=c["phase_split_batch_sizes"][0], k=n, filled=filled, cache_size=size,
                             calls=c["paired_verify_calls"], tree=StaticTree.balanced(n, width=c["tree_top_k"]))
          for n in c["tree_nodes"]]

  bar = tqdm(total=len(units) + (peer_runner.units() if peer_runner else 0), desc="benchmark", disable=not progress)
  compiled, calibration, records, outputs, previous = set(), Calibration(), [], {}, None
  for cell, cat in units:
    if previous is not None and (cell.batch_size, cell.temperature) != (previous.batch_size, previous.temperature):
      jax.clear_caches()  # no later cell reuses these programs; each holds memory maps (vm.max_map_count)
    previous = cell
    bar.set_postfix_str(f"{cell.method} k={cell.k} B={cell.batch_size} T={cell.temperature:g} {cat}")
    record, rows_out = _run_cell(target, drafters, cell, cat, suite[cat], prompt_ids[cat],
                                 buckets[cat], size, c, compiled, calibration)
    record.update(info)
    if (cell.method, cell.k, cell.temperature, cat) in tuning:
      record["tree_calibration"] = tuning[(cell.method, cell.k, cell.temperature, cat)]
    records.append(record)
    outputs[(cell, cat)] = rows_out
    bar.update(1)
  _compare_with_ar(records, outputs)
  if peer_runner:
    records.extend(peer_runner.run(suite, prompt_ids, on_unit=lambda: bar.update(1), info=info,
                                   decode=target.tokenizer.decode if target.tokenizer else None))
    _peer_speedups(records)
  bar.close()
  return records


def _call(target, batch: host.PreparedBatch, seed: int, calibration: Calibration, max_new_tokens=None) -> dict:
  """One fused call through the host path, as a call record (`benchmark.metrics`), with the CPUs' placement probed
  just before it (about a millisecond)."""
  round_trip_us = placement.core_round_trip_us()
  out = host.run_batch(target, batch, seed=seed, calibration=calibration, max_new_tokens=max_new_tokens)
  return {"wall_s": out.wall_s, "first_token_s": out.first_token_s, "round_trip_us": round_trip_us,
          "new_tokens": out.n_new_B.tolist(), "accepted": out.accepted_RxB.tolist(), "k": batch.spec.max_k,
          "k_R": out.k_R.tolist(), "tokens": out.tokens,
          **({"tree_ranks": out.tree_rank_RxBxD1.tolist(), "tree_children": out.tree_children_RxBxD1.tolist()}
             if out.tree_rank_RxBxD1 is not None else {})}


def _batches(target, drafter, k, cell: Cell, groups, prompt_ids, bucket, size, c) -> list:
  """The cell's calls prepared as `specjax.generate` prepares them, at the run's shared shapes."""
  tree = cell.tree if drafter is not None else None  # the paired autoregressive calls of a tree cell: no tree
  return [host.prepare(target, [prompt_ids[i] for i in rows], max_new_tokens=c["max_new_tokens"],
                       sampling=cell.sampling, drafter=drafter, k=None if tree else k, stop_at_eos=c["stop_at_eos"],
                       min_prompt_bucket=bucket, min_cache_size=size, tree=tree) for rows in groups]


def _warm(target, inputs, cell: Cell, bucket, compiled, seed, calibration):
  """The compiling call of the cell's program if not yet run (it stops after its first token: its decode rounds
  would not be timed): (compile_s, first_call_ttft_s), or Nones when compiled before."""
  key = (cell.method, cell.k, cell.batch_size, cell.temperature, bucket)
  if key in compiled:
    return None, None
  first = _call(target, inputs[0], seed, calibration, max_new_tokens=1)
  compiled.add(key)
  return first["wall_s"], first["first_token_s"]


def _run_cell(target, drafters, cell: Cell, category, specs, prompt_ids, bucket, size, c, compiled, calibration):
  drafter = drafters[cell.method]
  groups = _groups(len(prompt_ids), cell.batch_size)
  k = SpeculationPolicy(ks=c["auto_ks"]) if cell.auto else cell.k
  inputs = _batches(target, drafter, k, cell, groups, prompt_ids, bucket, size, c)
  max_k = inputs[0].spec.max_k
  paired = c["paired_with_ar"] and cell.method != "ar"
  partners = {"ar": _batches(target, None, 0, cell, groups, prompt_ids, bucket, size, c)} if paired else {}
  reference = c["paired_reference"]
  if reference and cell.method != "ar" and not is_reference(cell, reference):
    ref_cell = dataclasses.replace(cell, method=reference[0], k=reference[1], tree=None)
    partners["reference"] = _batches(target, drafters[reference[0]], reference[1], ref_cell, groups, prompt_ids,
                                     bucket, size, c)
    _warm(target, partners["reference"], ref_cell, bucket, compiled, c["seed"], calibration)
  seed0 = c["seed"]
  compile_s, first_call_ttft_s = _warm(target, inputs, cell, bucket, compiled, seed0, calibration)
  round_cost = None
  if cell.auto:  # measured on the first call (above, or in an earlier cell with this spec)
    round_cost = calibration.round_costs(engine.params_for(target, inputs[0].spec), drafter.params(),
                                         inputs[0].tokens_BxS, inputs[0].prompt_len_B, inputs[0].spec)
  calls, partner_calls = [], {name: [] for name in partners}
  order = [*partners, "cell"]
  for repeat in range(c["repeats"]):
    for g, inp in enumerate(inputs):
      seed = seed0 + g
      turn = (repeat + g) % len(order)  # rotate which goes first, so drift within a pair cancels
      for name in order[turn:] + order[:turn]:
        if name == "cell":
          calls.append(_call(target, inp, seed, calibration))
        else:
          partner_calls[name].append(_call(target, partners[name][g], seed, calibration))
  first = calls[:len(inputs)]
  tokens = [t for call_ in first for t in call_["tokens"]]
  rows = [i for g in groups for i in g]
  texts = None
  if target.tokenizer is not None:
    texts = [target.tokenizer.decode(t, skip_special_tokens=True) for t in tokens]
  scores = [quality.score(category, texts[r] if texts else "", specs[i], c["execute_code"])
            for r, i in enumerate(rows)]
  record = {"method": cell.method, "k": cell.k, "batch_size": cell.batch_size, "category": category,
            "temperature": cell.temperature, "implementation": "specjax",
            **metrics.summarize_calls(calls, max_k, tree=cell.tree),
            "tree": _describe(cell.tree),
            "auto_ks": list(c["auto_ks"]) if cell.auto else None,
            "auto_round_cost": round_cost.tolist() if round_cost is not None else None,
            "draft_ms_per_round": None, "verify_ms_per_round": None, "accept_ms_per_round": None,
            "compile_s": compile_s, "first_call_ttft_s": first_call_ttft_s, "prompt_bucket": bucket, "cache_size": size, "n_calls": len(calls),
            "prompt_tokens_mean": float(np.mean([len(prompt_ids[i]) for i in rows])),
            "quality": quality.aggregate(category, scores),
            "fused_ms_per_round": 1e3 * sum(x["wall_s"] for x in calls) / max(sum(len(x["accepted"]) for x in calls), 1)}
  if paired:
    record.update(metrics.paired_speedups(calls, partner_calls["ar"]))
  if "reference" in partners:
    record["paired_reference"] = list(reference)
    record["paired_vs_reference"] = metrics.paired_over(calls, partner_calls["reference"])
  if cell.method == "ar":
    record["tokens_per_round"] = 1.0 if record["tokens_per_round"] is not None else None
  mean_context = record["prompt_tokens_mean"] + c["max_new_tokens"] / 2
  record["bandwidth_bound_tok_s"] = bandwidth.bound_tokens_per_s(target.param_bytes, target.config, cell.batch_size,
                                                                 mean_context, bandwidth.copy_bandwidth_gbs())
  record["fraction_of_bandwidth_bound"] = (record["throughput_tok_s"] / record["bandwidth_bound_tok_s"]
                                           if record["throughput_tok_s"] else None)
  if (cell.batch_size in c["phase_split_batch_sizes"] and cell.method in c["phase_split_methods"] and not cell.auto
      and cell.tree is None):  # the phase split times a chain's phases
    inp = inputs[0]
    state, timings = run_phase_split(target, inp, jax.random.key(seed0))
    record.update(metrics.summarize_phases(timings))
    tokens_BxS, n_new_B = jax.device_get((state.tokens_BxS, state.n_new_B))
    tokens_ps = host.unpack_new_tokens(tokens_BxS, inp.prompt_len_B, n_new_B)
    record["phase_split_rounds"] = len(timings)
    record["phase_split_matches_fused"] = tokens_ps == first[0]["tokens"]
  return record, {"tokens": tokens, "scores": scores, "texts": texts}


def _compare_with_ar(records, outputs):
  """speedup_vs_ar, greedy agreement, sampled-quality agreement and the theory columns, against the AR record of
  the same batch size, category and temperature."""
  ar = {(r["batch_size"], r["category"], r["temperature"]): r for r in records if r["method"] == "ar"}
  ar_tokens = {(cell.batch_size, cat, cell.temperature): out["tokens"] for (cell, cat), out in outputs.items()
               if cell.method == "ar"}
  for (cell, cat), out in outputs.items():
    rec = next(r for r in records if (r["method"], r["k"], r["batch_size"], r["category"], r["temperature"])
               == (cell.method, cell.k, cell.batch_size, cat, cell.temperature))
    base = ar[(cell.batch_size, cat, cell.temperature)]
    rec["speedup_vs_ar"] = rec["throughput_tok_s"] / base["throughput_tok_s"] if base["throughput_tok_s"] else None
    if cell.method == "ar":
      rec.update(predicted_speedup=1.0, predicted_speedup_theorem=1.0, expected_tokens_per_round=1.0,
                 cost_ratio_c=0.0, verify_cost_ratio=1.0, theory_gap=None)
      continue
    if cell.temperature == 0.0:
      reference = ar_tokens[(cell.batch_size, cat, cell.temperature)]
      rec["greedy_match_ar"] = float(np.mean([a == b for a, b in zip(out["tokens"], reference)]))
    else:
      rec["quality"]["agrees_with_ar"] = quality.agree(rec["quality"], base["quality"])
    _theory(rec, base, cell)


def _theory(rec, base, cell):
  rec.update(predicted_speedup=None, predicted_speedup_theorem=None, expected_tokens_per_round=None,
             cost_ratio_c=None, verify_cost_ratio=None, theory_gap=None)
  alpha = rec.get("alpha")
  if cell.auto:
    rec["theory_gap"] = "adaptive K: the policy mixes K per round, so no single-K prediction applies"
    return
  if cell.tree is not None:
    tree_cells.tree_theory(rec, cell.tree)
    return
  if alpha is None:
    rec["theory_gap"] = "no verification rounds: nothing to predict from"
    return
  rec["expected_tokens_per_round"] = theory.expected_tokens_per_round(alpha, cell.k)
  phases = [rec["draft_ms_per_round"], rec["verify_ms_per_round"], rec["accept_ms_per_round"],
            base["verify_ms_per_round"], base["accept_ms_per_round"]]
  if any(p is None for p in phases):
    rec["theory_gap"] = ("no phase-split timing for this cell (add its batch size to phase_split_batch_sizes and "
                         "its method to phase_split_methods)")
    return
  c, r = theory.cost_ratios(*phases, k=cell.k)
  rec.update(cost_ratio_c=c, verify_cost_ratio=r, predicted_speedup=theory.corrected_speedup(alpha, cell.k, c, r),
             predicted_speedup_theorem=theory.theorem_speedup(alpha, cell.k, c))
  fused_ratio = rec["fused_ms_per_round"] / base["fused_ms_per_round"] if base["fused_ms_per_round"] else None
  rec["theory_gap"] = theory.explain_gap(rec["speedup_vs_ar"], rec["predicted_speedup"], rec["tokens_per_round"],
                                         rec["expected_tokens_per_round"], fused_ratio, cell.k * c + r,
                                         cell.batch_size)


def _describe(tree) -> dict | None:
  """The tree's kind, N, depth and branching (and a dynamic tree's top_k, a static tree's paths)."""
  if tree is None:
    return None
  return {"kind": type(tree).__name__, "nodes": tree.n_nodes, "depth": tree.max_depth,
          "branching": tree.branching, **({"top_k": tree.top_k} if hasattr(tree, "top_k") else
                                          {"paths": [list(path) for path in tree.paths]})}


def _peer_speedups(records):
  """A peer's speedups against specjax's autoregressive cell and against its own autoregressive run."""
  ours = {(r["batch_size"], r["category"], r["temperature"]): r for r in records if r["method"] == "ar"}
  theirs = {(r["implementation"], r["batch_size"], r["category"], r["temperature"]): r for r in records
            if r.get("implementation", "specjax") != "specjax" and r["k"] == 0}
  for rec in records:
    if rec.get("implementation", "specjax") == "specjax":
      continue
    key = (rec["batch_size"], rec["category"], rec["temperature"])
    base, own = ours.get(key), theirs.get((rec["implementation"],) + key)
    rec["speedup_vs_ar"] = rec["throughput_tok_s"] / base["throughput_tok_s"] if base else None
    rec["speedup_vs_own_ar"] = rec["throughput_tok_s"] / own["throughput_tok_s"] if own else None
    # specjax's matching cell: autoregressive, or its fastest quantized self-draft at the same K
    match = [r for r in records if r.get("implementation", "specjax") == "specjax" and r["k"] == rec["k"]
             and (r["batch_size"], r["category"], r["temperature"]) == key
             and (r["method"] == "ar" if rec["k"] == 0 else split_method(r["method"])[0] == "quantized")]
    # llama.cpp times its decoding only (the prompt excluded): specjax's decode rate against it, where recorded
    best = max((r.get("decode_tok_s") or r["throughput_tok_s"] for r in match), default=None)
    theirs_tok_s = rec.get("decode_tok_s") or rec["throughput_tok_s"]
    rec["specjax_over_peer"] = best / theirs_tok_s if best and theirs_tok_s else None