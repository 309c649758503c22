"""The load benchmark (`scripts/bench_serve.py`): `vllm bench serve`'s flags, arrivals and result keys, against any
OpenAI-compatible server over HTTP (specjax's own, vLLM, llama.cpp's `llama-server`), with prompts from specjax's
benchmark suite. It only speaks HTTP: it never reaches into an engine, so the same run measures any server.

workload: the requests (suite prompts, each category's output length); arrivals: when they are sent (Poisson /
gamma); client: one streamed request timed (TTFT, ITL, E2EL, usage, spec_decode); server_metrics: the server's
/metrics speculation counters; metrics: the result's figures from the timings; summary: the printed table; runner:
the bounded run that ties them together; cli: vLLM-style argv for absl."""

from specjax.benchmark.serving.arrivals import arrival_gaps, arrival_offsets
from specjax.benchmark.serving.client import RequestOutput
from specjax.benchmark.serving.metrics import calculate_metrics, parse_goodput
from specjax.benchmark.serving.runner import BenchConfig, run, run_async
from specjax.benchmark.serving.summary import format_summary
from specjax.benchmark.serving.workload import OUTPUT_LENS, BenchRequest, build_requests
