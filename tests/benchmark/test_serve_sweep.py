"""The serving sweep (scripts/bench_serve_sweep.py): report.md and the plots from synthetic results (tables, the
concurrency at which each speculative system stops paying, failures listed, repeats paired), the config's checks,
the servers' command lines, missing llama.cpp binaries as a recorded error, and real sweeps over two concurrencies
against two tiny-model servers (configs/serve_tiny.py) on loopback: one after another, and interleaved."""

import json
import os
import socket
import subprocess
import sys

import pytest

from configs import bench_serve_sweep
from specjax.benchmark.serving import servers, sweep, sweep_cells, sweep_config, sweep_report, sweep_targets

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONCURRENCIES = (1, 2, 4, 8, 16)
# output tokens / s at each concurrency
THROUGHPUT = {"autoregressive": (10, 19, 36, 60, 90), "k4": (14, 25, 40, 55, 80), "adaptive": (15, 26, 42, 65, 95),
              "llama-server": (12, 22, 40, 70, 100), "llama-server+draft": (14, 25, 45, 75, 95)}


def _result(throughput: float, concurrency: int) -> dict:
  return {"completed": 8, "failed": 0, "output_throughput": throughput, "median_ttft_ms": 50.0 * concurrency,
          "median_tpot_ms": 1000.0 / throughput * concurrency, "p99_tpot_ms": 2000.0 / throughput * concurrency,
          "request_goodput": throughput / 100, "acceptance_rate": 0.75, "errors": [""] * 8}


def _synthetic() -> dict:
  systems = {name: {"kind": "llama-server" if name.startswith("llama") else "specjax", "speculative": False,
                    "baselines": [], "command": ["serve", name], "startup_s": 3.0, "error": None}
             for name in list(THROUGHPUT) + ["broken"]}
  for name, bases in (("k4", ["autoregressive"]), ("adaptive", ["autoregressive"]),
                      ("llama-server+draft", ["autoregressive", "llama-server"])):
    systems[name].update(speculative=True, baselines=bases, adaptive=name == "adaptive")
  systems["broken"].update(speculative=True, baselines=["autoregressive"], error="RuntimeError: did not start")
  cells = [{"system": name, "concurrency": c, "request_rate": "inf", "num_prompts": max(8, 2 * c), "error": None,
            "result": _result(float(value), c)}
           for name, values in THROUGHPUT.items() for c, value in zip(CONCURRENCIES, values)]
  cells += [{"system": "autoregressive", "concurrency": None, "request_rate": 2.0, "num_prompts": 32, "error": None,
             "result": _result(30.0, 4)},
            {"system": "k4", "concurrency": None, "request_rate": 2.0, "num_prompts": 32, "error": None,
             "result": dict(_result(33.0, 4), failed=2, errors=["", "HTTP 429: queue full"])}]
  config = {"baseline": "autoregressive", "categories": ["prose"], "output_len": 0, "temperature": 0.0,
            "goodput": ["ttft:2000", "tpot:100"], "serve_config": "configs/serve_smollm2.py"}
  return {"config": config, "machine": {"platform": "test", "cpu_count": 2}, "date": "2025-01-01T00:00:00",
          "systems": systems, "cells": cells}


def test_stops_paying_is_the_lowest_concurrency_below_the_baseline():
  results = _synthetic()
  assert sweep_report.stops_paying(results, "k4", "autoregressive") == 8
  assert sweep_report.stops_paying(results, "adaptive", "autoregressive") is None
  assert sweep_report.stops_paying(results, "llama-server+draft", "autoregressive") is None
  assert sweep_report.stops_paying(results, "llama-server+draft", "llama-server") == 16
  assert sweep_cells.ratios(results, "k4", "autoregressive")[4] == pytest.approx(40 / 36)
  assert sweep_report.stops_paying(results, "broken", "autoregressive") is None   # nothing measured
  # an unmeasured concurrency is skipped, not counted as a loss: k4's cell at 8 failed
  next(c for c in results["cells"] if c["system"] == "k4" and c["concurrency"] == 8).update(result=None, error="x")
  assert sweep_report.stops_paying(results, "k4", "autoregressive") == 16


def test_the_report_and_plots_from_synthetic_results(tmp_path):
  results = _synthetic()
  path = sweep_report.write_outputs(results, str(tmp_path))
  text = open(path).read()
  for c in CONCURRENCIES:
    assert f"## Concurrency {c} ({max(8, 2 * c)} requests, all sent at once)" in text
  assert "## 2 requests / s (32 requests, Poisson arrivals, no concurrency limit)" in text
  assert ("| system | done/failed | output tok/s | vs autoregressive | median TTFT ms | median TPOT ms | p99 TPOT ms "
          "| goodput req/s | accept % |") in text
  assert "| k4 | 8/0 | 40.00 | 1.11 | 200.00 | 100.00 | 200.00 | 0.40 | 75.00 |" in text   # concurrency 4
  assert "| k4 | 8/2 | 33.00 | 1.10 |" in text   # the rate cell, against autoregressive at the same rate
  assert "| k4 | autoregressive | 8 | c1:1.40 c2:1.32 c4:1.11 c8:0.92 c16:0.89 |" in text
  assert "| adaptive | autoregressive | pays at every concurrency (1-16) |" in text
  assert "| llama-server+draft | autoregressive | pays at every concurrency (1-16) |" in text
  assert "| llama-server+draft | llama-server | 16 |" in text
  assert "| broken | autoregressive | not measured | - |" in text
  assert "- broken: RuntimeError: did not start" in text
  assert "- k4 at 2.0 req/s: 2 requests failed (HTTP 429: queue full)" in text
  plots = ["ttft_vs_concurrency.png", "ttft_vs_throughput.png", "tpot_vs_concurrency.png", "tpot_vs_throughput.png",
           "goodput_vs_concurrency.png", "goodput_vs_throughput.png", "throughput_vs_concurrency.png",
           "speedup_vs_concurrency.png"]
  for name in plots:
    assert f"![{name}]({name})" in text
    assert open(tmp_path / name, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
  for cell in results["cells"]:   # no SLOs: no goodput plots
    cell["result"]["request_goodput"] = None
  assert "goodput_vs_concurrency.png" not in sweep_report.write_plots(results, str(tmp_path / "none"))


def test_repeats_are_paired_by_repeat_and_their_median_reported(tmp_path):
  """Two repeats of each cell: a ratio is the median of the ratios of the same repeat's cells (the interleaved
  sweep ran them back to back), each number in the tables the median over repeats."""
  results = _synthetic()
  for cell in results["cells"]:
    cell["repeat"] = 0
  drift = {("autoregressive", 0): 1.0, ("autoregressive", 1): 0.5, ("k4", 0): 1.1, ("k4", 1): 0.6}
  results["cells"] += [dict(cell, repeat=1, result=dict(cell["result"], output_throughput=cell["result"][
      "output_throughput"] * drift.get((cell["system"], 1), 1.0) / drift.get((cell["system"], 0), 1.0)))
                       for cell in results["cells"] if cell["system"] in ("autoregressive", "k4")]
  paired = sweep_cells.paired_ratios(results, "k4", "autoregressive")
  assert paired[1] == pytest.approx([14 / 10, 14 * 0.6 / 1.1 / 5])
  assert sweep_cells.ratios(results, "k4", "autoregressive")[1] == pytest.approx((1.4 + 14 * 0.6 / 1.1 / 5) / 2)
  assert sweep_cells.ratios(results, "adaptive", "autoregressive")[1] == pytest.approx(15 / 10)  # one repeat
  cell = sweep_cells.measured(results)[("autoregressive", 1)]
  assert cell["output_throughput"] == pytest.approx(7.5) and cell["repeats"] == 2 and cell["completed"] == 8
  assert isinstance(cell["completed"], int)
  assert sweep_cells.median_result([{"completed": 2, "p99_tpot_ms": 3.0}, {"completed": 2}])["p99_tpot_ms"] is None
  results["config"].update(interleave=True, repeats=2)
  report = sweep_report.write_report(results, str(tmp_path))
  assert "Interleaved: every server up at once" in report and "median of 2 repeats" in report
  assert "c1:1.46 (1.40-1.53)" in report


def test_the_targets_are_judged_on_paired_ratios(tmp_path):
  """Each target's ratio per repeat and its median: the adaptive policy against the better of autoregressive and
  k4 at each concurrency, speculative TPOT at concurrency 1, specjax against llama-server with and without drafts."""
  results = _synthetic()
  next(c for c in results["cells"] if c["system"] == "adaptive" and c["concurrency"] == 4)["result"] = _result(33.0, 4)
  rows = {(row[0], row[1], row[2]): row for row in sweep_targets.target_rows(results)}
  assert rows["median TPOT <= 0.667x", 1, "adaptive / autoregressive"][4] == pytest.approx(10 / 15)
  assert rows["throughput >= 0.95x the better", 1, "adaptive / k4"][4:] == [pytest.approx(15 / 14), "yes"]
  assert rows["throughput >= 0.95x the better", 4, "adaptive / k4"][4:] == [pytest.approx(33 / 40), "**no**"]
  assert rows["throughput >= 0.95x the better", 8, "adaptive / autoregressive"][4] == pytest.approx(65 / 60)
  assert rows["p99 TPOT <= 1.05x", 4, "adaptive / autoregressive"][4:] == [pytest.approx(36 / 33), "**no**"]
  assert rows["throughput >= 1.0x", 8, "autoregressive / llama-server"][4:] == [pytest.approx(60 / 70), "**no**"]
  assert rows["speculative throughput > 1.0x", 1, "adaptive / llama-server+draft"][4] == pytest.approx(15 / 14)
  assert rows["speculative throughput > 1.0x", 4, "k4 / llama-server+draft"][4] == pytest.approx(40 / 45)
  text = sweep_report.write_report(results, str(tmp_path))
  assert "| throughput >= 0.95x the better | 4 | adaptive / k4 | 0.82 | 0.82 | **no** |" in text
  # a second repeat of autoregressive alone, at half the throughput; results.json without the adaptive field
  for cell in results["cells"]:
    cell["repeat"] = 0
  results["cells"] += [dict(cell, repeat=1, result=dict(cell["result"], output_throughput=cell["result"][
      "output_throughput"] / 2)) for cell in results["cells"] if cell["system"] == "autoregressive"]
  del results["systems"]["adaptive"]["adaptive"]
  results["config"]["specjax"] = {"adaptive": {"drafter": "quantized", "adaptive": True}}
  rows = {(row[0], row[1], row[2]): row for row in sweep_targets.target_rows(results)}
  assert rows["throughput >= 0.95x the better", 8, "adaptive / k4"][3] == "1.18"   # k4 now the better by median
  assert rows["throughput >= 1.0x", 8, "autoregressive / llama-server"][3] == "0.86"   # repeat 1 has no peer
  assert sweep_targets.roles(results)["adaptive"] == ["adaptive"]
  assert sweep_targets.target_rows({**results, "cells": []}) == []


def _config(**changes):
  config = bench_serve_sweep.get_config()
  with config.unlocked():
    for key, value in changes.items():
      setattr(config, key, value)
  return config


@pytest.mark.parametrize("changes, message", [
    ({"systems": ("autoregressive", "k5")}, r"config.systems \['k5'\] are not systems"),
    ({"systems": ("k4", "k4")}, "distinct systems"),
    ({"systems": ()}, "one or more distinct systems"),
    ({"specjax": {"k4": {"drafter": "quantized", "kk": 4}}, "systems": ("k4",)}, r"overrides \['kk'\]"),
    ({"specjax": {"k4": {"port": 9000}}, "systems": ("k4",)}, "set by the sweep"),
    ({"llama_server": {"llama-server": -1, "llama-server+draft": 4}}, "draft tokens per round"),
    ({"specjax": {"llama-server": {"drafter": ""}}}, "both in config.specjax and config.llama_server"),
    ({"baseline": "fast"}, "config.baseline 'fast' is not a system"),
    ({"concurrencies": (1, 0)}, "concurrencies must be integers >= 1"),
    ({"concurrencies": (2, 2)}, "repeats"),
    ({"repeats": 0}, "repeats must be integers >= 1"),
    ({"concurrencies": (), "request_rates": ()}, "no cells"),
    ({"request_rates": (1.0, -2.0)}, "request_rates must be distinct rates > 0"),
    ({"slots": 4}, "slots 4 < the largest concurrency 16"),
    ({"min_prompts": 0}, "min_prompts must be integers >= 1"),
    ({"categories": ("poetry",)}, "unknown or no categories"),
    ({"goodput": ("latency:5",)}, "unknown goodput metric"),
    ({"temperature": -1.0}, "temperature"),
    ({"startup_timeout_s": 0.0}, "startup_timeout_s must be > 0"),
    ({"serve_config": "configs/nothing.py"}, "no file"),
    ({"endpoint": "/v1/embeddings"}, "config.endpoint must be"),
    ({"token_id_vocab": 256}, "token-id prompts"),
])
def test_config_errors_name_the_setting(changes, message):
  with pytest.raises(ValueError, match=message):
    sweep_config.validate(_config(**changes))


def test_a_plain_dict_config_is_checked_too():
  with pytest.raises(ValueError, match="config.interleave must be True or False, got 'yes'"):
    sweep_config.validate(dict(_config().to_dict(), interleave="yes"))


def test_cells_systems_and_command_lines(tmp_path):
  s = sweep_config.validate(_config(request_rates=(0.5,)))
  assert [(c["concurrency"], c["num_prompts"]) for c in sweep_config.cells(s)] == [
      (1, 8), (2, 8), (4, 8), (8, 16), (16, 32), (None, 32)]
  assert sweep_config.cells(s)[-1]["request_rate"] == 0.5 and sweep_config.slots(s) == 16
  assert [n for n in s["systems"] if sweep_config.speculates(s, n)] == ["k4", "adaptive", "llama-server+draft"]
  assert sweep_config.baselines(s, "llama-server+draft") == ["autoregressive", "llama-server"]
  assert sweep_config.baselines(s, "autoregressive") == []
  command = sweep.command(s, "adaptive", 8123)
  assert command[1].endswith("scripts/serve.py") and command[2].endswith("configs/serve_smollm2.py")
  assert set(command[3:]) == {"--config.slots=16", "--config.drafter=quantized", "--config.draft_model=q4",
                              "--config.adaptive=True", "--config.host=127.0.0.1", "--config.port=8123",
                              "--config.warmup_temperatures=(0.0,)",
                              "--config.warmup_prompt_lengths=(33, 65, 129, 257, 513, 1025)"}
  assert "--config.drafter=" in sweep.command(s, "autoregressive", 1)
  assert servers.flag_value((0.0, 1.0)) == "(0.0, 1.0)" and servers.flag_value(True) == "True"
  files = ("bin/llama-server", "target-f32.gguf", "draft.gguf")
  plain = servers.llama_server_command(files, 0, 8124, slots=16, ctx_per_slot=2048, threads=2)
  assert plain[:3] == ["bin/llama-server", "-m", "target-f32.gguf"] and "-md" not in plain
  text = " ".join(plain)
  for part in ("--host 127.0.0.1", "--port 8124", "-np 16", "-c 32768", "-t 2", "-tb 2", "--no-cache-prompt"):
    assert part in text
  drafted = " ".join(servers.llama_server_command(files, 4, 8124, slots=16, ctx_per_slot=2048, threads=2))
  for part in ("-md draft.gguf", "--spec-type draft-simple", "--spec-draft-n-max 4", "--spec-draft-n-min 4",
               "-td 2"):
    assert part in drafted


def test_missing_llama_cpp_binaries_name_the_build_script(tmp_path):
  with pytest.raises(ValueError, match="llama-server.*build them with bash scripts/build_llama_cpp.sh"):
    servers.llama_files(str(tmp_path), "smollm2-135m", str(tmp_path / "out"))


def _port_is_closed(url: str) -> bool:
  host, port = url.rsplit("/", 1)[-1].split(":")
  with socket.socket() as s:
    return s.connect_ex((host, int(port))) != 0


def _tiny_sweep(tmp_path, **changes):
  changes = {"systems": ("autoregressive", "lookup", "llama-server"), "concurrencies": (1, 2), **changes}
  return _config(output_dir=str(tmp_path), serve_config=os.path.join(ROOT, "configs", "serve_tiny.py"),
                 specjax={"autoregressive": {"drafter": ""}, "lookup": {"drafter": "prompt_lookup", "k": 3}},
                 llama_server={"llama-server": 0}, llama_cpp_dir=str(tmp_path / "no-llama"),
                 min_prompts=2, prompts_per_slot=1, categories=("prose", "code"), prompts_per_category=1,
                 output_len=8, ignore_eos=True, endpoint="/v1/completions", token_id_vocab=256, max_prompt_tokens=32,
                 warmup_output_len=2, warmup_prompt_lengths=(1, 17), goodput=("ttft:60000",), timeout_s=60.0,
                 max_cell_s=120.0, startup_timeout_s=120.0, stop_timeout_s=20.0, **changes)


def test_a_real_sweep_against_tiny_servers(tmp_path):
  config = _tiny_sweep(tmp_path, interleave=False, repeats=1)
  lines = []
  results = sweep.run_sweep(config, log=lines.append)
  on_disk = json.load(open(tmp_path / "results.json"))
  assert on_disk == json.loads(json.dumps(results))
  assert on_disk["machine"]["cpu_count"] == os.cpu_count() and on_disk["config"]["concurrencies"] == [1, 2]
  systems = on_disk["systems"]
  assert systems["autoregressive"]["error"] is None and systems["lookup"]["error"] is None, lines
  assert "build them with bash scripts/build_llama_cpp.sh" in systems["llama-server"]["error"]
  assert systems["lookup"]["speculative"] and systems["lookup"]["baselines"] == ["autoregressive"]
  assert systems["lookup"]["warmup"]["completed"] == 2 and systems["lookup"]["warmup"]["failed"] == 0
  cells = [(c["system"], c["concurrency"]) for c in on_disk["cells"]]
  assert cells == [("autoregressive", 1), ("autoregressive", 2), ("lookup", 1), ("lookup", 2)]
  for cell in on_disk["cells"]:
    result = cell["result"]
    assert cell["error"] is None and result["completed"] == 2 and result["failed"] == 0, result["errors"]
    assert result["output_lens"] == [8, 8] and result["max_concurrency"] == cell["concurrency"]
    assert result["request_goodput"] == pytest.approx(result["request_throughput"])
    assert "p99_tpot_ms" in result and "median_itl_ms" in result
  assert on_disk["cells"][3]["result"]["spec_decode"][0]["method"] == "prompt_lookup"
  for name in ("autoregressive", "lookup"):   # stopped, their logs kept
    assert "--config.port=" in open(systems[name]["log"]).read().splitlines()[0]
  assert all(_port_is_closed(c["result"]["base_url"]) for c in on_disk["cells"])
  report = open(tmp_path / "report.md").read()
  assert "## Concurrency 2 (2 requests, all sent at once)" in report and "| lookup | 2/0 |" in report
  assert "| lookup | autoregressive |" in report and "- llama-server: ValueError" in report
  assert os.path.exists(tmp_path / "tpot_vs_throughput.png")


def test_an_interleaved_sweep_keeps_every_server_up_and_rotates_the_order(tmp_path):
  """Both tiny servers up before the first cell; each cell run by both back to back, the order rotated per cell and
  repeat; the report's ratios paired by repeat; every server stopped at the end."""
  lines = []
  results = sweep.run_sweep(_tiny_sweep(tmp_path, interleave=True, repeats=2), log=lines.append)
  assert results["systems"]["lookup"]["error"] is None and "build_llama_cpp.sh" in results["systems"][
      "llama-server"]["error"], lines
  first_cell = next(i for i, line in enumerate(lines) if "requests" in line and "concurrency" in line)
  assert all(any(line.startswith(f"[{name}] warmed up") for line in lines[:first_cell])
             for name in ("autoregressive", "lookup"))
  order = [(c["repeat"], c["concurrency"], c["system"]) for c in results["cells"]]
  assert order == [(0, 1, "autoregressive"), (0, 1, "lookup"), (0, 2, "lookup"), (0, 2, "autoregressive"),
                   (1, 1, "lookup"), (1, 1, "autoregressive"), (1, 2, "autoregressive"), (1, 2, "lookup")]
  assert all(c["error"] is None and c["result"]["completed"] == 2 for c in results["cells"])
  assert all(0.05 < results["systems"][name]["rss_gib"] < 8 for name in ("autoregressive", "lookup"))
  assert len(sweep_cells.paired_ratios(results, "lookup", "autoregressive")[2]) == 2
  assert all(_port_is_closed(c["result"]["base_url"]) for c in results["cells"])
  assert "Interleaved" in open(tmp_path / "report.md").read()


def test_a_server_that_would_not_fit_runs_alone_after_the_others(tmp_path, monkeypatch):
  """Less memory available than the largest live server holds: the next system is deferred, run alone once the
  interleaved ones stopped, and the report says its ratios are unpaired."""
  monkeypatch.setattr(servers, "mem_available_gib", lambda: 0.01)
  lines = []
  results = sweep.run_sweep(_tiny_sweep(tmp_path, systems=("autoregressive", "lookup"), concurrencies=(1,)),
                            log=lines.append)
  assert any(line.startswith("[lookup] deferred: 0.0 GiB available") for line in lines), lines
  assert [(c["system"], c["repeat"]) for c in results["cells"]] == [("autoregressive", 0), ("autoregressive", 1),
                                                                    ("lookup", 0), ("lookup", 1)]
  assert results["systems"]["lookup"]["deferred"] and results["systems"]["lookup"]["error"] is None
  assert all(c["result"]["completed"] == 2 for c in results["cells"])
  assert "deferred for memory" in open(tmp_path / "report.md").read()


def test_the_script_records_a_peer_without_binaries(tmp_path):
  process = subprocess.run(
      [sys.executable, "scripts/bench_serve_sweep.py", "--config=configs/bench_serve_sweep.py",
       "--config.systems=('llama-server+draft',)", f"--config.llama_cpp_dir={tmp_path / 'none'}",
       f"--config.output_dir={tmp_path / 'out'}"],
      cwd=ROOT, capture_output=True, text=True, timeout=120, env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert process.returncode == 0, process.stderr[-2000:]
  assert "(failed: llama-server+draft)" in process.stdout
  results = json.load(open(tmp_path / "out" / "results.json"))
  assert "build_llama_cpp.sh" in results["systems"]["llama-server+draft"]["error"] and results["cells"] == []
  assert "## Failures" in open(tmp_path / "out" / "report.md").read()
