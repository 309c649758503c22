"""The serving sweep (scripts/bench_serve_sweep.py): each system's server started on a free loopback port, warmed up
(one untimed pass over the prompts) and loaded by the benchmark runner at each cell (concurrency or request rate),
`repeats` times: interleaved (every server up, each cell run by all systems back to back, so their ratios are
paired) or one system after another (each stopped before the next starts). A system that fails (no binaries, a
server that does not come up or dies, an unknown setting) is recorded with its error and the sweep goes on.
results.json is rewritten after every cell, so a crash loses nothing measured; report.md and the plots after every
system (interleaved: every cell's round of the systems)."""

import contextlib
import datetime
import math
import os
import platform
import time
import traceback

from specjax.benchmark.serving import runner, servers, sweep_config, sweep_report
from specjax.benchmark.serving.runner import BenchConfig

PERCENTILES = (50, 90, 99)


def machine() -> dict:
  """Where the sweep ran (no jax here: the servers own the accelerator, the sweep process only sends HTTP)."""
  return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
          "cpu_count": os.cpu_count(), "python": platform.python_version()}


def jsonable(value):
  """JSON without infinities (written "inf", as vLLM does) and with tuples as lists."""
  if isinstance(value, dict):
    return {str(k): jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [jsonable(v) for v in value]
  if isinstance(value, float) and math.isinf(value):
    return "inf"
  return value


def write_results(results: dict, output_dir: str) -> str:
  """results.json, replaced whole (a reader never sees half a file)."""
  path = os.path.join(output_dir, "results.json")
  runner.save(jsonable(results), path + ".partial")
  os.replace(path + ".partial", path)
  return path


def bench_config(s: dict, base_url: str, label: str, cell: dict | None = None) -> BenchConfig:
  """The runner's settings for a cell, or (cell None) for the untimed warmup: each prompt once, a few tokens, every
  slot busy, the cells' other request settings (ignore_eos may pick a different compiled program)."""
  common = dict(base_url=base_url, endpoint=s["endpoint"], label=label, seed=s["seed"], categories=s["categories"],
                prompts_per_category=s["prompts_per_category"], temperature=s["temperature"],
                token_id_vocab=s["token_id_vocab"], max_prompt_tokens=s["max_prompt_tokens"],
                timeout_s=s["timeout_s"], max_duration_s=s["max_cell_s"], metric_percentiles=PERCENTILES)
  if cell is None:
    return BenchConfig(**common, num_prompts=0, max_concurrency=sweep_config.slots(s),
                       output_len=s["warmup_output_len"], ignore_eos=s["ignore_eos"])
  return BenchConfig(**common, num_prompts=cell["num_prompts"], max_concurrency=cell["concurrency"] or 0,
                     request_rate=cell["request_rate"], goodput=s["slos"], output_len=s["output_len"],
                     ignore_eos=s["ignore_eos"])


def command(s: dict, name: str, port: int) -> list[str]:
  """The system's server command line (a llama-server system checks its binaries and writes its target first)."""
  if name in s["specjax"]:
    # only the sweep's sampling setting is compiled at startup (the server's default warms temperature 1 too)
    overrides = {"slots": sweep_config.slots(s), "warmup_temperatures": (float(s["temperature"]),),
                 "warmup_prompt_lengths": s["warmup_prompt_lengths"], **s["specjax"][name]}
    return servers.specjax_command(s["serve_config"], overrides, port)
  files = servers.llama_files(s["llama_cpp_dir"], s["serve"]["model"], s["output_dir"])
  ctx = s["llama_ctx_per_slot"] or s["serve"].get("max_model_len") or 2048
  return servers.llama_server_command(files, s["llama_server"][name], port, sweep_config.slots(s), ctx,
                                      s["llama_cpp_threads"])


def _kind(s: dict, name: str) -> str:
  return "specjax" if name in s["specjax"] else "llama-server"


def _system_info(s: dict, name: str) -> dict:
  return {"kind": _kind(s, name),
          "speculative": sweep_config.speculates(s, name), "baselines": sweep_config.baselines(s, name),
          "adaptive": sweep_config.adapts(s, name),
          "command": None, "log": os.path.join(s["output_dir"], "logs", f"{name}.log"), "startup_s": None,
          "warmup": None, "rss_gib": None, "error": None}


def _failed(info: dict, name: str, error: Exception, log) -> None:
  info["error"] = f"{type(error).__name__}: {error}"
  if not isinstance(error, (RuntimeError, ValueError, OSError)):
    info["traceback"] = traceback.format_exc()
  log(f"[{name}] failed: {info['error']}")


def start_system(s: dict, name: str, results: dict, stack: contextlib.ExitStack, save, log=print):
  """Starts one system's server inside `stack` (which stops it) and warms it up; returns (process, base url), or
  None with the failure in results['systems'][name]['error']."""
  info = results["systems"][name] = _system_info(s, name)
  try:
    port = servers.free_port()
    info["command"] = command(s, name, port)
    log(f"[{name}] starting: {' '.join(info['command'])}")
    process, base_url, info["startup_s"] = stack.enter_context(servers.serving(
        info["command"], port, info["log"], s["startup_timeout_s"], s["stop_timeout_s"]))
    log(f"[{name}] up in {info['startup_s']:.0f} s at {base_url}")
    if s["warmup_output_len"]:
      start = time.perf_counter()
      warm = runner.run(bench_config(s, base_url, name), log=lambda *_: None)
      info["warmup"] = {"completed": warm["completed"], "failed": warm["failed"],
                        "seconds": time.perf_counter() - start, "errors": sorted({e for e in warm["errors"] if e})}
      log(f"[{name}] warmed up: {warm['completed']} requests in {info['warmup']['seconds']:.0f} s")
    info["rss_gib"] = servers.rss_gib(process.pid)   # what running several servers at once must fit
    return process, base_url
  except Exception as error:
    _failed(info, name, error, log)
    return None
  finally:
    save()


def run_cell(s: dict, name: str, up, cell: dict, repeat: int, results: dict, save, log=print) -> None:
  """One cell of one system's server (`up`: its process and base url); RuntimeError if the server died in it."""
  process, base_url = up
  where = (f"concurrency {cell['concurrency']}" if cell["concurrency"] else f"{cell['request_rate']} req/s")
  where += f", repeat {repeat + 1}" if s["repeats"] > 1 else ""
  log(f"[{name}] {where}: {cell['num_prompts']} requests")
  record = {"system": name, **cell, "repeat": repeat, "error": None, "result": None}
  try:
    record["result"] = r = runner.run(bench_config(s, base_url, name, cell), log=lambda *_: None)
    log(f"[{name}] {where}: {r['completed']} done, {r['failed']} failed, {r['output_throughput']:.1f} tok/s, "
        f"median TTFT {r['median_ttft_ms']:.0f} ms, median TPOT {r['median_tpot_ms']:.1f} ms")
  except Exception as error:   # the runner records request failures itself; this is anything else
    record["error"] = f"{type(error).__name__}: {error}"
    log(f"[{name}] {where} failed: {record['error']}")
  results["cells"].append(record)
  save()
  if process.poll() is not None:
    raise RuntimeError(f"the server exited with code {process.returncode} during the {where} cell")


def run_system(s: dict, name: str, results: dict, save, log=print) -> None:
  """One system alone: start, warm up, every cell (each repeat), stop; a failure goes into its 'error'."""
  with contextlib.ExitStack() as stack:
    up = start_system(s, name, results, stack, save, log)
    try:
      for repeat in range(s["repeats"] if up else 0):
        for cell in sweep_config.cells(s):
          run_cell(s, name, up, cell, repeat, results, save, log)
    except RuntimeError as error:
      _failed(results["systems"][name], name, error, log)
  save()


def rotated(names: list, by: int) -> list:
  """names with the first `by` (modulo their number) moved to the end."""
  by = by % len(names) if names else 0
  return names[by:] + names[:by]


def run_interleaved(s: dict, results: dict, save, log=print) -> None:
  """Every system's server up at once (started and warmed one after another, idle while the others run), then each
  cell run by every system back to back, in an order rotated per cell and repeat: the ratios between systems are
  paired, minutes of machine drift apart no more (`sweep_cells.paired_ratios`)."""
  deferred = []
  with contextlib.ExitStack() as stack:
    live = {}
    for name in s["systems"]:
      if not fits_beside(results, live, name, _kind(s, name), log):
        deferred.append(name)
      elif up := start_system(s, name, results, stack, save, log):
        live[name] = up
    for repeat in range(s["repeats"]):
      for i, cell in enumerate(sweep_config.cells(s)):
        for name in rotated(list(live), repeat + i):
          try:
            run_cell(s, name, live[name], cell, repeat, results, save, log)
          except RuntimeError as error:
            _failed(results["systems"][name], name, error, log)
            del live[name]
        sweep_report.write_outputs(jsonable(results), s["output_dir"])
  for name in deferred:   # after the others stopped: alone, unpaired
    run_system(s, name, results, save, log)
    results["systems"][name]["deferred"] = True
  save()


def fits_beside(results: dict, live: dict, name: str, kind: str, log=print) -> bool:
  """Whether another server of `kind` fits in the memory left beside the live ones: what the largest live one of
  its kind holds, and a third more (a server's warmup peaks above what it holds after); the first of its kind
  starts. Three 16-slot specjax servers (7-8 GiB each) do not fit 24 GiB."""
  systems = results["systems"]
  largest = max((systems[other].get("rss_gib") or 0.0 for other in live if systems[other]["kind"] == kind),
                default=0.0)
  available = servers.mem_available_gib()
  if not largest or available is None or available >= 4 / 3 * largest:
    return True
  log(f"[{name}] deferred: {available:.1f} GiB available, a {kind} server up holds {largest:.1f} GiB; it runs "
      f"alone after the others stop (its ratios unpaired)")
  return False


def run_sweep(config, log=print) -> dict:
  """Every system of the config, interleaved (config.interleave) or one after another; returns the results written
  to output_dir."""
  s = sweep_config.validate(config)
  os.makedirs(s["output_dir"], exist_ok=True)
  results = {"config": {k: v for k, v in s.items() if k != "slos"}, "machine": machine(),
             "date": datetime.datetime.now().isoformat(timespec="seconds"), "systems": {}, "cells": []}

  def save():
    write_results(results, s["output_dir"])

  save()
  if s["interleave"]:
    run_interleaved(s, results, save, log)
  else:
    for name in s["systems"]:
      run_system(s, name, results, save, log)
      sweep_report.write_outputs(jsonable(results), s["output_dir"])
  sweep_report.write_outputs(jsonable(results), s["output_dir"])
  return jsonable(results)
