"""The load benchmark (`specjax.benchmark.serving`, scripts/bench_serve.py): vLLM's metric arithmetic on synthetic
timings (percentiles, TPOT, goodput under SLOs, throughputs), the arrival process (seeded Poisson gaps of mean
1 / rate, burstiness moving the variance, none at an infinite rate), the workload, the stream parser against a mock
transport, a bounded run against a server that never answers, and end to end against the real server on loopback
(the tiny model of tests/serving/test_server.py): every request completes, vLLM's keys are there, the token counts
are the server's; the script against a bad base URL counts failures instead of crashing."""

import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest

from serving.test_server import NAME, _wait, server, target  # noqa: F401  (test_server's live server, tiny model)
from specjax.benchmark import tasks
from specjax.benchmark.serving import (BenchConfig, RequestOutput, arrival_gaps, arrival_offsets, build_requests,
                                       calculate_metrics, client, format_summary, parse_goodput, run)
from specjax.benchmark.serving.cli import normalize_argv
from specjax.benchmark.serving.metrics import peak_concurrency, tpot
from specjax.benchmark.serving.server_metrics import parse_spec_counters, spec_decode_delta
from specjax.benchmark.serving.workload import OUTPUT_LENS
from specjax.serving.metrics import Counters, prometheus_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# vLLM's result keys (vllm/benchmarks/serve.py) for the default --percentile-metrics and --metric-percentiles 99
VLLM_KEYS = ["duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
             "request_goodput", "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts",
             "itls", "latencies", "start_times", "errors", "max_concurrent_requests"] + [
    f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "std", "p99")]


def _done(ttft, latency, tokens, itl=(), start=0.0, prompt=10) -> RequestOutput:
  return RequestOutput(success=True, ttft=ttft, latency=latency, output_tokens=tokens, itl=list(itl),
                       start_time=start, prompt_tokens=prompt)


# ---- metrics -------------------------------------------------------------------------------------------------------

SYNTHETIC = [_done(0.1, 1.1, 11, [0.1] * 10, start=0.0, prompt=5),     # TPOT 100 ms
             _done(0.2, 0.6, 5, [0.05, 0.15, 0.1, 0.1], start=0.5),   # TPOT 100 ms
             _done(0.3, 0.3, 1, start=1.0, prompt=7),                   # one token: no TPOT (0 for goodput)
             _done(0.4, 2.4, 21, [0.1] * 20, start=1.2),               # TPOT 100 ms, slow E2EL
             RequestOutput(error="HTTP 429: queue full")]


def test_metrics_on_synthetic_timings():
  result = calculate_metrics(SYNTHETIC, 4.0, percentiles=(50, 90, 99))
  assert result["completed"] == 4 and result["failed"] == 1
  assert result["total_input_tokens"] == 5 + 10 + 7 + 10 and result["total_output_tokens"] == 38
  assert result["request_throughput"] == pytest.approx(1.0)
  assert result["output_throughput"] == pytest.approx(38 / 4)
  assert result["total_token_throughput"] == pytest.approx((32 + 38) / 4)
  assert result["request_goodput"] is None   # no SLOs given
  ttfts_ms = [100, 200, 300, 400]
  assert result["mean_ttft_ms"] == pytest.approx(250) and result["median_ttft_ms"] == pytest.approx(250)
  assert result["std_ttft_ms"] == pytest.approx(np.std(ttfts_ms))
  assert result["p50_ttft_ms"] == pytest.approx(250) and result["p90_ttft_ms"] == pytest.approx(370)
  assert result["p99_ttft_ms"] == pytest.approx(np.percentile(ttfts_ms, 99))
  assert tpot(SYNTHETIC[0]) == pytest.approx(0.1) and tpot(SYNTHETIC[1]) == pytest.approx(0.1)
  assert tpot(SYNTHETIC[2]) is None
  assert result["mean_tpot_ms"] == pytest.approx(100) and result["std_tpot_ms"] == pytest.approx(0, abs=1e-9)
  itls_ms = [100] * 10 + [50, 150, 100, 100] + [100] * 20   # pooled over requests
  assert result["mean_itl_ms"] == pytest.approx(np.mean(itls_ms)) and result["p99_itl_ms"] == pytest.approx(
      np.percentile(itls_ms, 99))
  assert result["median_e2el_ms"] == pytest.approx(850) and result["mean_e2el_ms"] == pytest.approx(1100)
  assert result["max_concurrent_requests"] == 3   # [0, 1.1), [0.5, 1.1), [1.0, 1.3), [1.2, 3.6): three at 1.0-1.1
  only = calculate_metrics(SYNTHETIC, 4.0, percentile_metrics=("ttft",))
  assert "mean_ttft_ms" in only and not any(k.endswith("_tpot_ms") or k.endswith("_e2el_ms") for k in only)


@pytest.mark.parametrize("slos,good", [
    ({"ttft": 250}, 2),                          # 100, 200 ms
    ({"tpot": 100.0001}, 4),                     # all at 100 ms; the one-token request counts TPOT 0
    ({"tpot": 99}, 1),                           # only the one-token request
    ({"e2el": 1100}, 3),
    ({"ttft": 350, "tpot": 101, "e2el": 1000}, 2),   # every SLO must hold: 0.6 s and 0.3 s requests
    ({"ttft": 0}, 0),
])
def test_goodput_counts_requests_meeting_every_slo(slos, good):
  result = calculate_metrics(SYNTHETIC, 2.0, goodput=slos)
  assert result["request_goodput"] == pytest.approx(good / 2.0)


def test_no_completed_request_gives_zeros_not_errors():
  result = calculate_metrics([RequestOutput(error="x")] * 3, 1.5)
  assert result["completed"] == 0 and result["failed"] == 3 and result["output_throughput"] == 0
  assert result["mean_ttft_ms"] == 0 and result["p99_e2el_ms"] == 0 and result["max_concurrent_requests"] == 0


def test_goodput_and_percentile_arguments_are_checked():
  assert parse_goodput(["ttft:500", "tpot:50.5", "e2el:0"]) == {"ttft": 500, "tpot": 50.5, "e2el": 0}
  assert parse_goodput([]) == {}
  for bad in (["itl:5"], ["ttft"], ["ttft:fast"], ["ttft:-1"]):
    with pytest.raises(ValueError):
      parse_goodput(bad)
  with pytest.raises(ValueError, match="unknown percentile metrics"):
    calculate_metrics([], 1.0, percentile_metrics=("ttft", "latency"))
  with pytest.raises(ValueError, match="percentiles"):
    calculate_metrics([], 1.0, percentiles=(101,))
  assert peak_concurrency([_done(0, 1, 2, start=0), _done(0, 1, 2, start=1)]) == 1   # an end before a start


def test_the_summary_reads_like_vllms():
  result = dict(calculate_metrics(SYNTHETIC, 4.0, percentiles=(99,), goodput={"ttft": 250}), duration=4.0,
                max_concurrency=2, request_rate=1.5, errors=["HTTP 429: queue full", "", "HTTP 429: queue full"],
                mean_acceptance_length=2.5, acceptance_rate=0.5)
  text = format_summary(result, (99,))
  assert text.splitlines()[0] == "============ Serving Benchmark Result ============"
  for line in ["Successful requests:                     4", "Failed requests:                         1",
               "Request goodput (req/s):                 0.50", "Mean TTFT (ms):                          250.00",
               "P99 E2EL (ms):", "Acceptance length, per request:          2.50", "HTTP 429: queue full"]:
    assert line in text, line
  assert text.count("HTTP 429") == 1


# ---- arrivals --------------------------------------------------------------------------------------------------------

def test_poisson_gaps_have_mean_one_over_rate_and_are_seeded():
  gaps = arrival_gaps(20000, rate=4.0, seed=1)
  assert gaps.mean() == pytest.approx(0.25, rel=0.03)
  assert gaps.std() == pytest.approx(0.25, rel=0.05)   # exponential: std = mean
  assert np.array_equal(gaps, arrival_gaps(20000, rate=4.0, seed=1))
  assert not np.array_equal(gaps[:10], arrival_gaps(10, rate=4.0, seed=2))


def test_burstiness_changes_the_variance_not_the_mean():
  variances = {}
  for shape in (0.25, 1.0, 4.0):
    gaps = arrival_gaps(20000, rate=2.0, burstiness=shape, seed=3)
    assert gaps.mean() == pytest.approx(0.5, rel=0.05)
    variances[shape] = gaps.var()
    assert variances[shape] == pytest.approx(0.25 / shape, rel=0.15)   # Gamma(k, 1/(r k)): variance 1 / (r^2 k)
  assert variances[0.25] > 3 * variances[1.0] > 9 * variances[4.0]
  assert np.allclose(arrival_gaps(5, rate=2.0, burstiness=math.inf), 0.5)


def test_an_infinite_rate_sends_everything_at_once():
  assert np.array_equal(arrival_gaps(7, math.inf), np.zeros(7))
  assert np.array_equal(arrival_offsets(7, math.inf), np.zeros(7))
  offsets = arrival_offsets(4, 2.0, seed=5)
  assert offsets[0] == 0 and np.all(np.diff(offsets) > 0)
  assert np.allclose(np.diff(offsets), arrival_gaps(3, 2.0, seed=5))
  assert len(arrival_offsets(0, 1.0)) == 0
  for rate, shape in ((0, 1), (-1, 1), (1, 0)):
    with pytest.raises(ValueError):
      arrival_gaps(3, rate, shape)


# ---- workload and command line ---------------------------------------------------------------------------------------

def test_requests_carry_their_categorys_output_length_in_a_seeded_order():
  requests = build_requests(("code", "long_context"), prompts_per_category=2, num_prompts=7, seed=4)
  assert len(requests) == 7 and {r.category for r in requests} == {"code", "long_context"}
  assert all(r.output_len == OUTPUT_LENS[r.category] for r in requests)
  assert len({r.prompt_id for r in requests[:4]}) == 4 and requests[4:] == requests[:3]   # each once, then cycled
  assert build_requests(("code", "long_context"), 2, 7, seed=4) == requests
  assert [r.prompt_id for r in build_requests(("code", "long_context"), 2, 4, seed=5)] != [
      r.prompt_id for r in requests[:4]]
  assert {r.output_len for r in build_requests(("prose",), 3, output_len=5)} == {5}
  assert len(build_requests()) == sum(len(tasks.load_category(c)) for c in tasks.CATEGORIES)
  ids = build_requests(("prose",), 1, token_id_vocab=50, max_prompt_tokens=16)[0].prompt
  assert isinstance(ids, tuple) and len(ids) == 16 and all(1 <= t < 50 for t in ids)
  with pytest.raises(ValueError):
    build_requests(("poetry",), 1)


def test_vllm_spelling_of_the_command_line():
  argv = ["bench", "--base-url", "http://x:1", "--goodput", "ttft:500", "tpot:50", "--save-result",
          "--max_concurrency=4", "--metric-percentiles=50,99", "--endpoint", "/v1/chat-x"]
  assert normalize_argv(argv) == ["bench", "--base_url", "http://x:1", "--goodput=ttft:500,tpot:50", "--save_result",
                                  "--max_concurrency=4", "--metric_percentiles=50,99", "--endpoint", "/v1/chat-x"]


def test_server_spec_counters_from_prometheus_text():
  before = Counters(max_k=3, num_drafts=10, num_draft_tokens=30, num_accepted_tokens=12, accepted_per_pos=[6, 4, 2])
  after = Counters(max_k=3, num_drafts=30, num_draft_tokens=90, num_accepted_tokens=42, accepted_per_pos=[18, 14, 10])
  parsed = [parse_spec_counters(prometheus_text(c, "m")) for c in (before, after)]
  assert parsed[0] == {"num_drafts": 10, "num_draft_tokens": 30, "num_accepted_tokens": 12, "per_pos": {0: 6, 1: 4,
                                                                                                         2: 2}}
  delta = spec_decode_delta(*parsed)
  assert delta["spec_decode_num_drafts"] == 20 and delta["spec_decode_acceptance_rate"] == pytest.approx(50.0)
  assert delta["spec_decode_acceptance_length"] == pytest.approx(2.5)
  assert delta["spec_decode_per_position_acceptance_rates"] == pytest.approx([0.6, 0.5, 0.4])
  assert parse_spec_counters("# nothing\nvllm:generation_tokens_total 5\n") is None
  assert spec_decode_delta(parsed[0], None) == {} and spec_decode_delta(parsed[0], parsed[0]) == {}


# ---- the stream parser, on canned responses ------------------------------------------------------------------------

def _sse(*events) -> bytes:
  return "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events).encode()


def _send(content: bytes, status: int = 200, chat: bool = False, timeout_s=None) -> RequestOutput:
  transport = httpx.MockTransport(lambda request: httpx.Response(status, content=content))

  async def go():
    async with httpx.AsyncClient(transport=transport) as http:
      return await client.send(http, "http://test/v1/completions", {}, chat=chat, timeout_s=timeout_s)

  return asyncio.run(go())


def test_the_stream_parser_times_text_chunks_and_reads_usage():
  chat = _send(_sse({"choices": [{"delta": {"role": "assistant", "content": ""}}]},   # no text: not the first token
                    {"choices": [{"delta": {"content": "Hel"}}]}, {"choices": [{"delta": {"content": "lo"}}]},
                    {"choices": [{"delta": {"content": " you"}, "finish_reason": "length"}],
                     "spec_decode": {"rounds": 2, "draft_tokens": 6, "accepted_tokens": 3}},
                    {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}, "[DONE]"), chat=True)
  assert chat.success and chat.output_tokens == 4 and chat.prompt_tokens == 9 and len(chat.itl) == 2
  assert 0 <= chat.ttft <= chat.latency and chat.finish_reason == "length" and chat.spec_decode["rounds"] == 2
  counted = _send(_sse({"choices": [{"text": "a"}]}, {"choices": [{"text": "b"}]}, {"choices": [{"text": ""}]},
                       {"choices": [{"text": "", "finish_reason": "stop"}],
                        "timings": {"draft_n": 8, "draft_n_accepted": 6}}, "[DONE]"))
  assert counted.success and counted.output_tokens == 2 and len(counted.itl) == 1   # no usage: text chunks counted
  assert counted.spec_decode["acceptance_rate"] == pytest.approx(0.75)   # llama-server's timings


@pytest.mark.parametrize("content,status,message", [
    (b'{"error": {"message": "queue is full", "code": 429}}', 429, "HTTP 429: queue is full"),
    (_sse({"choices": [{"text": "a"}]}, {"error": {"message": "boom"}}), 200, "server error: boom"),
    (_sse({"choices": [{"text": "a", "finish_reason": "abort"}]}, "[DONE]"), 200, "finish_reason 'abort'"),
    (_sse({"choices": [{"text": "a"}]}), 200, "without a finish_reason"),
    (b"data: {not json\n\n", 200, "not JSON"),
])
def test_failed_streams_are_recorded_not_raised(content, status, message):
  out = _send(content, status)
  assert not out.success and message in out.error


# ---- bounded runs ------------------------------------------------------------------------------------------------

def test_the_run_is_bounded_against_a_server_that_never_answers():
  with socket.socket() as silent:   # accepts connections (the kernel's backlog), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    started = time.perf_counter()
    result = run(BenchConfig(base_url=url, model="m", categories=("prose",), num_prompts=3, max_concurrency=1,
                             timeout_s=60, max_duration_s=0.5), log=lambda *_: None)
    assert time.perf_counter() - started < 5   # the /metrics reads wait no longer than the run's limit
    assert result["completed"] == 0 and result["failed"] == 3
    assert sum("cancelled in flight" in e for e in result["errors"]) == 1
    assert sum("not sent" in e for e in result["errors"]) == 2
    timed = run(BenchConfig(base_url=url, model="m", categories=("prose",), num_prompts=2, timeout_s=0.3,
                            max_duration_s=30), log=lambda *_: None)
    assert timed["failed"] == 2 and all("timed out after 0.3 s" in e for e in timed["errors"])


def _metric(url: str, name: str) -> float:
  for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
    if line.startswith(name + "{") or line.startswith(name + " "):
      return float(line.rsplit(" ", 1)[1])
  raise AssertionError(f"{name} not in /metrics")


def test_end_to_end_against_the_server(server, tiny_tokenizer, tmp_path):  # noqa: F811
  url, engine = server
  before = _metric(url, "vllm:generation_tokens_total")
  config = BenchConfig(base_url=url, categories=("prose", "structured"), prompts_per_category=3, num_prompts=6,
                       max_concurrency=2, output_len=8, ignore_eos=True, goodput={"ttft": 60000, "e2el": 60000},
                       metric_percentiles=(50, 99), timeout_s=120, max_duration_s=300, label="tiny")
  result = run(config, log=lambda *_: None)
  assert result["completed"] == 6 and result["failed"] == 0, result["errors"]
  assert not (set(VLLM_KEYS) - set(result)), set(VLLM_KEYS) - set(result)
  assert result["model_id"] == NAME and result["request_rate"] == "inf" and result["max_concurrency"] == 2
  assert result["output_lens"] == [8] * 6 and result["total_output_tokens"] == 48
  assert _metric(url, "vllm:generation_tokens_total") - before == 48   # the server's own count
  requests = build_requests(("prose", "structured"), 3, 6, seed=0, output_len=8)
  assert result["input_lens"] == [len(tiny_tokenizer.encode(r.prompt)) for r in requests]
  assert result["request_categories"] == [r.category for r in requests]
  assert result["request_goodput"] == pytest.approx(result["request_throughput"])
  assert 1 <= result["max_concurrent_requests"] <= 2
  for ttft, latency, itl in zip(result["ttfts"], result["latencies"], result["itls"]):
    assert 0 < ttft <= latency and len(itl) <= 7 and ttft + sum(itl) <= latency + 1e-6
  assert result["p50_tpot_ms"] > 0 and result["mean_e2el_ms"] >= result["mean_ttft_ms"]
  assert all(s["method"] == "prompt_lookup" and s["k"] == 3 for s in result["spec_decode"])
  rounds = sum(s["rounds"] for s in result["spec_decode"])
  assert result["mean_acceptance_length"] == pytest.approx(
      1 + sum(s["accepted_tokens"] for s in result["spec_decode"]) / rounds)
  assert result["spec_decode_num_drafts"] == rounds   # the server's /metrics: the same rounds (nothing else served)
  assert result["spec_decode_acceptance_length"] == pytest.approx(result["mean_acceptance_length"])
  json.dumps(result)

  chat = run(BenchConfig(base_url=url, endpoint="/v1/chat/completions", categories=("prose",), num_prompts=2,
                         max_concurrency=2, output_len=4, ignore_eos=True, request_rate=50.0, seed=1,
                         goodput={"ttft": 0}), log=lambda *_: None)
  assert chat["completed"] == 2 and chat["output_lens"] == [4, 4] and chat["request_goodput"] == 0
  assert chat["backend"] == "openai-chat" and chat["request_rate"] == 50.0
  assert _wait(lambda: engine.free_slots() == 2)


def test_the_script_against_a_bad_base_url_counts_failures(tmp_path):
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]   # closed again: nothing listens there
  process = subprocess.run(
      [sys.executable, "scripts/bench_serve.py", f"--base-url=http://127.0.0.1:{port}", "--num-prompts", "4",
       "--max-concurrency", "2", "--categories", "prose", "--goodput", "ttft:500", "tpot:50", "--save-result",
       "--result-dir", str(tmp_path), "--result-filename", "bad.json", "--metric-percentiles", "90,99"],
      cwd=ROOT, capture_output=True, text=True, timeout=120, env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert process.returncode == 0, process.stderr[-2000:]
  assert "============ Serving Benchmark Result ============" in process.stdout
  assert "Failed requests:                         4" in process.stdout
  result = json.load(open(tmp_path / "bad.json"))
  assert result["completed"] == 0 and result["failed"] == 4 and result["request_goodput"] == 0
  assert all(e for e in result["errors"]) and result["goodput"] == {"ttft": 500, "tpot": 50}
  assert "p90_ttft_ms" in result and "p99_itl_ms" in result and result["model_id"] is None
