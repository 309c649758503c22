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
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from specjax.benchmark import bandwidth, metrics, quality, tasks, theory
from specjax.benchmark.phases import run_phase_split
from specjax.benchmark.verify_cost import paired_verify_cost
from specjax.cache import cache_size
from specjax.engine import generate_program
from specjax.generate import pack_batch, unpack_new_tokens
from specjax.generate import prompt_bucket as auto_bucket
from specjax.calibration import calibrate_round_cost
from specjax.distributed import host_values
from specjax.drafters.layer_skip import default_exit_layers
from specjax.policy import SpeculationPolicy
from specjax.sampling import SamplingParams

METHODS = ("ar", "draft_model", "prompt_lookup", "layer_skip", "medusa", "feature_head")
PEERS = ("", "hf")
SWEEPS = ("grid", "axes", "smoke")
MAX_K = 64
REQUIRED_KEYS = ("method", "k", "batch_size", "category", "temperature", "tokens_per_round", "acceptance_rate",
                 "draft_ms_per_round", "verify_ms_per_round", "accept_ms_per_round", "throughput_tok_s",
                 "latency_ms_per_token_p50", "latency_ms_per_token_p90", "speedup_vs_ar", "predicted_speedup",
                 "quality", "machine", "jax_version", "devices")


AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class Cell:
  method: str
  k: int | str          # drafts per round, or "auto" (the adaptive SpeculationPolicy over config.auto_ks)
  batch_size: int
  temperature: float

  @property
  def auto(self) -> bool:
    return self.k == AUTO

  @property
  def sampling(self) -> SamplingParams:
    return SamplingParams(temperature=self.temperature)


def _ints(name, values, low):
  values = tuple(values)
  if not values or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low for v in values):
    raise ValueError(f"config.{name} must be a non-empty list of ints >= {low}, got {list(values)}")
  return tuple(int(v) for v in values)


def validate_config(config) -> dict:
  """Checks every setting before any model work; returns a plain dict of normalized settings."""
  c = dict(config.to_dict() if hasattr(config, "to_dict") else config)
  methods = tuple(c.get("methods", METHODS))
  unknown = [m for m in methods if m not in METHODS]
  if unknown:
    raise ValueError(f"unknown method(s) {unknown}; known: {list(METHODS)}")
  c["methods"] = ("ar",) + tuple(m for m in dict.fromkeys(methods) if m != "ar")  # the baseline always runs
  dirs = dict(c.get("drafter_dirs") or {})
  unknown = [m for m in dirs if m not in METHODS]
  if unknown:
    raise ValueError(f"config.drafter_dirs names unknown method(s) {unknown}; known: {list(METHODS)}")
  for method in c["methods"]:
    if method in ("medusa", "feature_head") and not dirs.get(method):
      raise ValueError(f"method {method!r} needs config.drafter_dirs.{method}: a directory written by "
                       f"scripts/train_draft.py (or 'untrained' to time a freshly initialised head)")
    if dirs.get(method) not in ("", None, "untrained") and not os.path.isdir(os.path.expanduser(dirs[method])):
      raise ValueError(f"config.drafter_dirs.{method}={dirs[method]!r} is not a directory: train it with "
                       f"python scripts/train_draft.py --config=configs/train_{method}.py, or drop {method!r} "
                       f"from config.methods")
  categories = tuple(c.get("categories", tasks.CATEGORIES))
  unknown = [x for x in categories if x not in tasks.CATEGORIES]
  if unknown or not categories:
    raise ValueError(f"unknown or no categories {unknown or list(categories)}; known: {list(tasks.CATEGORIES)}")
  c["categories"] = tuple(dict.fromkeys(categories))
  c["auto_ks"] = _ints("auto_ks", c.get("auto_ks", (1, 2, 4)), 1) if c.get("auto_ks", (1,)) else ()
  if c["auto_ks"]:
    SpeculationPolicy(ks=c["auto_ks"])  # names a bad list
  # No fixed K at all is allowed when the adaptive cells run: the policy against autoregressive decoding alone.
  c["ks"] = _ints("ks", c.get("ks", (4,)), 1) if c.get("ks", (4,)) or not c["auto_ks"] else ()
  if max(c["ks"] + c["auto_ks"]) > MAX_K:
    raise ValueError(f"config.ks must be <= {MAX_K}, got {list(c['ks'])}")
  c["batch_sizes"] = _ints("batch_sizes", c.get("batch_sizes", (1,)), 1)
  c["phase_split_batch_sizes"] = tuple(int(b) for b in c.get("phase_split_batch_sizes", ()))
  missing = [b for b in c["phase_split_batch_sizes"] if b not in c["batch_sizes"]]
  if missing:
    raise ValueError(f"phase_split_batch_sizes {missing} are not in batch_sizes {list(c['batch_sizes'])}")
  c["phase_split_methods"] = tuple(c.get("phase_split_methods", ()) or c["methods"])
  missing = [m for m in c["phase_split_methods"] if m not in c["methods"]]
  if missing:
    raise ValueError(f"phase_split_methods {missing} are not in methods {list(c['methods'])}")
  temps = tuple(float(t) for t in c.get("temperatures", (0.0,)))
  if not temps or any(not np.isfinite(t) or t < 0 for t in temps):
    raise ValueError(f"config.temperatures must be finite numbers >= 0, got {list(temps)}")
  c["temperatures"] = temps
  c["paired_verify_calls"] = c.get("paired_verify_calls", 0)
  for name, low in (("max_new_tokens", 1), ("prompts_per_category", 1), ("repeats", 1), ("draft_layers", 1),
                    ("prompt_bucket", 0), ("prompt_lookup_max_ngram", 1), ("max_prompt_tokens", 0),
                    ("paired_verify_calls", 0)):
    value = c.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
      raise ValueError(f"config.{name} must be an int >= {low}, got {value!r}")
  for category in c["categories"]:
    tasks.select(category, c["prompts_per_category"])  # raises if a category has fewer prompts
  if c.get("sweep", "grid") not in SWEEPS:
    raise ValueError(f"config.sweep must be one of {SWEEPS}, got {c.get('sweep')!r}")
  if c.get("peers", "") not in PEERS:
    raise ValueError(f"config.peers must be one of {PEERS}, got {c.get('peers')!r}")
  if c.get("peers") and c.get("model") == "random":
    raise ValueError("config.peers='hf' needs a model file (a GGUF or 'smollm2-135m'), not model='random'")
  if not c.get("output_dir"):
    raise ValueError("config.output_dir must be set")
  return c


def plan(c: dict, max_k: dict | None = None) -> list[Cell]:
  """Cells to run: AR at every batch size, plus each drafter method over K x batch size ('grid'), over K at the
  first batch size and over batch sizes at the first K ('axes'), or at the first K and batch size only, the first
  drafter method also at the last K and last batch size together ('smoke': every code path, fewest compilations);
  the adaptive K ("auto") at every batch size ('grid') or at the first. K above a method's max_k (e.g. Medusa's
  head count) is skipped."""
  sweep, first_b = c.get("sweep", "grid"), c["batch_sizes"][0]
  first_k, last = (c["ks"][0], (c["ks"][-1], c["batch_sizes"][-1])) if c["ks"] else (None, None)
  cells = []
  for temp, batch in itertools.product(c["temperatures"], c["batch_sizes"]):
    cells.append(Cell("ar", 0, batch, temp))
    for i, method in enumerate(c["methods"][1:]):
      for k in c["ks"]:
        if k > (max_k or {}).get(method, MAX_K):
          continue
        if (sweep == "grid" or (batch == first_b and k == first_k)
            or (sweep == "axes" and (batch == first_b or k == first_k))
            or (sweep == "smoke" and i == 0 and (k, batch) == last)):
          cells.append(Cell(method, k, batch, temp))
      if c["auto_ks"] and (sweep == "grid" or batch == first_b):
        cells.append(Cell(method, AUTO, batch, temp))
  return cells


def machine_info() -> dict:
  return {"machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                      "cpu_count": os.cpu_count(), "python": platform.python_version()},
          "jax_version": jax.__version__, "devices": [str(d) for d in jax.devices()]}


def _load_target(c: dict):
  if c.get("model") == "random":
    from specjax import ModelConfig, init_model
    return init_model(ModelConfig(**dict(c["random_model"])), seed=c.get("seed", 0))
  from specjax.checkpoints import load_model
  return load_model(c["model"], dtype=c.get("dtype") or None)


def _drafter(method: str, target, c: dict):
  """The method's drafter: config.drafter_dirs[method] names a trained one (scripts/train_draft.py), or
  "untrained" for a freshly initialised head; draft_model defaults to the target's first draft_layers layers
  and layer_skip to its first layer_skip_layers layers and head."""
  from specjax.cli import drafter_from_config
  if method == "ar":
    return None
  source = os.path.expanduser(dict(c.get("drafter_dirs") or {}).get(method, "") or "")
  if method == "draft_model" and not source:
    if c["draft_layers"] >= target.config.n_layers:
      raise ValueError(f"config.draft_layers={c['draft_layers']} must be below the target's "
                       f"{target.config.n_layers} layers")
    source = f"truncate:{c['draft_layers']}"
  if method == "layer_skip" and not source:
    layers = c.get("layer_skip_layers") or default_exit_layers(target.config.n_layers)
    if not 1 <= layers < target.config.n_layers:
      raise ValueError(f"config.layer_skip_layers={layers} must be in [1, {target.config.n_layers})")
    source = str(layers)
  return drafter_from_config(method, target, source, max_ngram=c["prompt_lookup_max_ngram"])


def _encode(target, text: str, c: dict) -> list[int]:
  if target.tokenizer is None:
    return tasks.byte_ids(text, target.config.vocab_size, c["max_prompt_tokens"] or 256)
  ids = target.tokenizer.apply_chat_template(text) if c.get("chat", True) else target.tokenizer.encode(text)
  return ids[-c["max_prompt_tokens"]:] if c["max_prompt_tokens"] else ids


def _groups(n_prompts: int, batch: int) -> list[list[int]]:
  """Prompt indices per call: prompts cycled so that every call is a full batch."""
  rows = list(itertools.islice(itertools.cycle(range(n_prompts)), -(-n_prompts // batch) * batch))
  return [rows[i:i + batch] for i in range(0, len(rows), batch)]


class _Inputs:
  """Host arrays of one call, packed as `specjax.generate` packs them, at the run's shared shape."""

  def __init__(self, prompt_ids, rows, size, max_new):
    self.tokens_BxS, self.prompt_len_B, self.max_new_B = pack_batch([prompt_ids[i] for i in rows], size, max_new)

  def device(self):
    return jnp.asarray(self.tokens_BxS), jnp.asarray(self.prompt_len_B), jnp.asarray(self.max_new_B)


def run_benchmark(config, target=None, progress: bool = True) -> list[dict]:
  """Runs the benchmark (validated first) and returns its records; `target` overrides `config.model`."""
  from tqdm import tqdm
  c = validate_config(config)
  peer_runner = None
  if c.get("peers") == "hf":
    from specjax.benchmark import peers
    peer_runner = peers.available(c)
  target = target if target is not None else _load_target(c)
  eos_ids = tuple(target.config.eos_token_ids) if c.get("stop_at_eos", True) else ()
  suite = {cat: tasks.select(cat, c["prompts_per_category"]) for cat in c["categories"]}
  prompt_ids = {cat: [_encode(target, p["prompt"], c) for p in suite[cat]] for cat in c["categories"]}
  buckets = {cat: max(c["prompt_bucket"], auto_bucket(max(map(len, ids)))) for cat, ids in prompt_ids.items()}
  longest = max(max(map(len, ids)) for ids in prompt_ids.values())
  needed = longest + c["max_new_tokens"] + max(c["ks"] + c["auto_ks"])
  if needed > target.config.max_seq_len:
    raise ValueError(f"longest prompt {longest} + max_new_tokens + max K = {needed} exceeds the model's max_seq_len "
                     f"{target.config.max_seq_len}; lower max_new_tokens or set max_prompt_tokens")
  size = cache_size(max(max(buckets.values()), needed))
  drafters = {m: _drafter(m, target, c) for m in c["methods"]}
  cells = plan(c, {m: d.max_k for m, d in drafters.items() if d is not None})
  info = machine_info()
  info["copy_bandwidth_gbs"] = bandwidth.copy_bandwidth_gbs()
  if c["paired_verify_calls"]:
    info["paired_verify_cost"] = [
        dict(paired_verify_cost(target, batch=b, k=k, filled=int(np.mean([len(p) for p in prompt_ids[cat]]))
                                + c["max_new_tokens"] // 2, cache_size=size, calls=c["paired_verify_calls"]),
             category=cat)
        for b in c["phase_split_batch_sizes"] for k in c["ks"] for cat in c["categories"]]

  units = len(cells) * len(c["categories"])
  bar = tqdm(total=units + (peer_runner.units() if peer_runner else 0), desc="benchmark", disable=not progress)
  compiled, calibrated, records, outputs = set(), {}, [], {}
  for i, (cell, cat) in enumerate(itertools.product(cells, c["categories"])):
    if i and (cell.batch_size, cell.temperature) != (previous.batch_size, previous.temperature):
      jax.clear_caches()  # no later cell reuses these programs; each holds memory maps (vm.max_map_count)
    previous = cell
    bar.set_postfix_str(f"{cell.method} k={cell.k} B={cell.batch_size} T={cell.temperature:g} {cat}")
    record, rows_out = _run_cell(target, drafters[cell.method], cell, cat, suite[cat], prompt_ids[cat],
                                 buckets[cat], size, eos_ids, c, compiled, calibrated)
    record.update(info)
    records.append(record)
    outputs[(cell, cat)] = rows_out
    bar.update(1)
  _compare_with_ar(records, outputs)
  if peer_runner:
    records.extend(peer_runner.run(suite, prompt_ids, on_unit=lambda: bar.update(1), info=info))
    _peer_speedups(records)
  bar.close()
  return records


def _caller(target, drafter, cell: Cell, bucket, eos_ids, c, calibrated, calibration_inputs):
  """`call(inputs, seed)` -> call record for one cell's program, and the adaptive cell's measured round costs
  (calibrated once per program, on `calibration_inputs`, in this run)."""
  drafter_params = drafter.params() if drafter is not None else ()
  k = SpeculationPolicy(ks=c["auto_ks"]) if cell.auto else cell.k
  max_k = k.max_k if cell.auto else k
  program = dict(graphdef=target.graphdef, drafter=drafter, sampling=cell.sampling, eos_ids=eos_ids,
                 prompt_bucket=bucket)
  round_cost, policy_inputs = None, ()
  if cell.auto:
    key = (cell.method, cell.batch_size, cell.temperature, bucket)
    if key not in calibrated:
      calibrated[key] = calibrate_round_cost(target.params, drafter_params, (calibration_inputs.tokens_BxS,
                                             calibration_inputs.prompt_len_B), policy=k, **program)
    round_cost = calibrated[key]
    policy_inputs = (jnp.asarray(round_cost), jnp.int32(-1))

  def call(inputs, seed):
    start, timings = time.perf_counter(), {}
    state = generate_program(target.params, drafter_params, *inputs.device(), jax.random.key(seed), k=k,
                             timings=timings, policy_inputs=policy_inputs, **program)
    tokens, n_new, rounds, accepted, k_R = host_values((state.tokens_BxS, state.n_new_B, state.round,
                                                           state.accepted_RxB, state.k_R))
    wall = time.perf_counter() - start
    return {"wall_s": wall, "first_token_s": timings["first_token_s"], "new_tokens": n_new.tolist(),
            "accepted": accepted[:int(rounds)].tolist(), "k": max_k, "k_R": k_R[:int(rounds)].tolist(),
            "tokens": unpack_new_tokens(tokens, inputs.prompt_len_B, n_new)}

  return call, max_k, round_cost


def _run_cell(target, drafter, cell: Cell, category, specs, prompt_ids, bucket, size, eos_ids, c, compiled,
              calibrated):
  groups = _groups(len(prompt_ids), cell.batch_size)
  inputs = [_Inputs(prompt_ids, rows, size, c["max_new_tokens"]) for rows in groups]
  call, max_k, round_cost = _caller(target, drafter, cell, bucket, eos_ids, c, calibrated, inputs[0])
  paired = c.get("paired_with_ar", False) and cell.method != "ar"
  ar_call = _caller(target, None, Cell("ar", 0, cell.batch_size, cell.temperature), bucket, eos_ids, c,
                    calibrated, inputs[0])[0] if paired else None
  key = (cell.method, cell.k, cell.batch_size, cell.temperature, bucket)
  compile_s = first_call_ttft_s = None
  if key not in compiled:  # the compiling call stops after its first token: its decode rounds would not be timed
    first = call(_Inputs(prompt_ids, groups[0], size, 1), c.get("seed", 0))
    compile_s, first_call_ttft_s = first["wall_s"], first["first_token_s"]
    compiled.add(key)
  calls, ar_calls = [], []
  for repeat in range(c["repeats"]):
    for g, inp in enumerate(inputs):
      seed = c.get("seed", 0) + g
      if paired and (repeat + g) % 2 == 0:  # alternate which goes first, so drift within a pair cancels
        ar_calls.append(ar_call(inp, seed))
      calls.append(call(inp, seed))
      if paired and (repeat + g) % 2 == 1:
        ar_calls.append(ar_call(inp, seed))
  first = calls[:len(inputs)]
  tokens = [t for call_ in first for t in call_["tokens"]]
  rows = [i for g in groups for i in g]
  texts = None
  if target.tokenizer is not None:
    texts = [target.tokenizer.decode(t, skip_special_tokens=True) for t in tokens]
  scores = [quality.score(category, texts[r] if texts else "", specs[i], c.get("execute_code", True))
            for r, i in enumerate(rows)]
  record = {"method": cell.method, "k": cell.k, "batch_size": cell.batch_size, "category": category,
            "temperature": cell.temperature, "implementation": "specjax",
            **metrics.summarize_calls(calls, max_k),
            "auto_ks": list(c["auto_ks"]) if cell.auto else None,
            "auto_round_cost": round_cost.tolist() if round_cost is not None else None,
            "draft_ms_per_round": None, "verify_ms_per_round": None, "accept_ms_per_round": None,
            "compile_s": compile_s, "first_call_ttft_s": first_call_ttft_s, "prompt_bucket": bucket, "cache_size": size, "n_calls": len(calls),
            "prompt_tokens_mean": float(np.mean([len(prompt_ids[i]) for i in rows])),
            "quality": quality.aggregate(category, scores),
            "fused_ms_per_round": 1e3 * sum(x["wall_s"] for x in calls) / max(sum(len(x["accepted"]) for x in calls), 1)}
  if paired:
    record.update(metrics.paired_speedups(calls, ar_calls))
  if cell.method == "ar":
    record["tokens_per_round"] = 1.0 if record["tokens_per_round"] is not None else None
  mean_context = record["prompt_tokens_mean"] + c["max_new_tokens"] / 2
  record["bandwidth_bound_tok_s"] = bandwidth.bound_tokens_per_s(target.param_bytes, target.config, cell.batch_size,
                                                                 mean_context, bandwidth.copy_bandwidth_gbs())
  record["fraction_of_bandwidth_bound"] = (record["throughput_tok_s"] / record["bandwidth_bound_tok_s"]
                                           if record["throughput_tok_s"] else None)
  if cell.batch_size in c["phase_split_batch_sizes"] and cell.method in c["phase_split_methods"] and not cell.auto:
    inp = inputs[0]
    state, timings = run_phase_split(target, drafter, *inp.device(), jax.random.key(c.get("seed", 0)), k=cell.k,
                                     sampling=cell.sampling, eos_ids=eos_ids, prompt_bucket=bucket)
    record.update(metrics.summarize_phases(timings))
    tokens_ps = unpack_new_tokens(*jax.device_get((state.tokens_BxS,)), inp.prompt_len_B, jax.device_get(state.n_new_B))
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


def _peer_speedups(records):
  ours = {(r["batch_size"], r["category"], r["temperature"]): r for r in records if r["method"] == "ar"}
  theirs = {(r["batch_size"], r["category"], r["temperature"]): r for r in records if r["method"] == "hf_ar"}
  for rec in records:
    if rec.get("implementation") != "hf":
      continue
    key = (rec["batch_size"], rec["category"], rec["temperature"])
    base, own = ours.get(key), theirs.get(key)
    rec["speedup_vs_ar"] = rec["throughput_tok_s"] / base["throughput_tok_s"] if base else None
    rec["speedup_vs_own_ar"] = rec["throughput_tok_s"] / own["throughput_tok_s"] if own else None
