"""The bounded run: requests from the suite, sent at their arrival times (under `max_concurrency`, a semaphore, as
vLLM's), each streamed and timed; the server's /metrics speculation counters read before and after; the result dict
with vLLM's keys plus specjax's (per-request `spec_decode`, its pooled acceptance, each request's category). The run
never outlasts `max_duration_s`: requests still in flight then are cancelled and, like those never sent and any that
failed, counted in `failed` with their error."""

import asyncio
import contextlib
import dataclasses
import datetime
import json
import math
import os
import time

import httpx

from specjax.benchmark import tasks
from specjax.benchmark.serving import client, metrics, server_metrics
from specjax.benchmark.serving.arrivals import arrival_offsets
from specjax.benchmark.serving.client import RequestOutput
from specjax.benchmark.serving.workload import BenchRequest, build_requests

API_KEY_ENV = "SPECJAX_API_KEY"
SIDE_READ_S = 10.0   # the longest wait for /v1/models and /metrics (a server that does not answer them is skipped)


@dataclasses.dataclass
class BenchConfig:
  """The benchmark's settings (scripts/bench_serve.py's flags; vLLM's names where it has them)."""

  base_url: str = "http://127.0.0.1:8000"
  endpoint: str = "/v1/completions"     # or /v1/chat/completions (prompts sent as one user message)
  model: str = ""                       # "" = the first model the server's /v1/models lists (none sent if that fails)
  label: str = "openai"                 # names the result file (e.g. autoregressive, k4, adaptive, llama-server)
  num_prompts: int = 0                  # 0 = each selected prompt once
  request_rate: float = math.inf        # requests per second; inf sends all at once
  burstiness: float = 1.0               # gamma shape of the arrival gaps (1: Poisson)
  max_concurrency: int = 0              # requests in flight at most (0: no limit)
  seed: int = 0                         # prompt order, arrival gaps, and per-request seeds when temperature > 0
  goodput: dict = dataclasses.field(default_factory=dict)  # {"ttft"|"tpot"|"e2el": SLO in ms}
  percentile_metrics: tuple = metrics.METRICS
  metric_percentiles: tuple = (99,)
  categories: tuple = tasks.CATEGORIES
  prompts_per_category: int = 0         # the first N prompts of each category (0: all)
  output_len: int = 0                   # > 0 replaces each category's own output length
  ignore_eos: bool = False              # ask for exactly output_len tokens (vLLM's ignore_eos)
  temperature: float = 0.0
  api_key: str = ""                     # sent as 'Authorization: Bearer KEY'; "" = $SPECJAX_API_KEY, else none
  timeout_s: float = 600.0              # one request's limit (connection, stream and all)
  max_duration_s: float = 3600.0        # the whole run's limit (warmups and the /metrics reads excluded)
  num_warmups: int = 0                  # untimed requests (the first prompt) sent before the run
  token_id_vocab: int = 0               # > 0: prompts as token ids (models without a tokenizer, e.g. serve_tiny)
  max_prompt_tokens: int = 0            # token-id prompts cut to this length (0: uncut)

  @property
  def chat(self) -> bool:
    return self.endpoint.rstrip("/").endswith("/chat/completions")

  def check(self) -> None:
    if self.num_prompts < 0 or self.prompts_per_category < 0 or self.output_len < 0 or self.num_warmups < 0:
      raise ValueError("num_prompts, prompts_per_category, output_len and num_warmups must be >= 0")
    if self.max_concurrency < 0:
      raise ValueError(f"max_concurrency must be >= 0 (0: no limit), got {self.max_concurrency}")
    if self.temperature < 0:
      raise ValueError(f"temperature must be >= 0, got {self.temperature}")
    if not self.timeout_s > 0 or not self.max_duration_s > 0:
      raise ValueError("timeout_s and max_duration_s must be > 0")
    if not self.base_url.startswith(("http://", "https://")):
      raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
    if self.chat and self.token_id_vocab:
      raise ValueError("token-id prompts go to /v1/completions, not a chat endpoint")
    unknown = set(self.goodput) - set(metrics.SLO_METRICS)
    if unknown or any(not v >= 0 for v in self.goodput.values()):
      raise ValueError(f"goodput SLOs are {{name: ms >= 0}} with names in {metrics.SLO_METRICS}, got {self.goodput}")
    metrics.calculate_metrics([], 1.0, percentiles=self.metric_percentiles,
                              percentile_metrics=self.percentile_metrics)   # names and ranges


def _number(value: float):
  """JSON has no infinity: vLLM writes an infinite request rate as "inf"."""
  return "inf" if math.isinf(value) else value


async def _first_model(http: httpx.AsyncClient, base_url: str, headers: dict, timeout_s: float) -> str | None:
  try:
    reply = await http.get(base_url + "/v1/models", headers=headers, timeout=timeout_s)
    return reply.json()["data"][0]["id"] if reply.status_code == 200 else None
  except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
    return None


async def run_async(config: BenchConfig, requests: list[BenchRequest] | None = None, log=print) -> dict:
  """Runs the benchmark (requests: default the suite's, from the config) and returns the result dict."""
  config.check()
  requests = requests if requests is not None else build_requests(
      config.categories, config.prompts_per_category, config.num_prompts, config.seed, config.output_len,
      config.token_id_vocab, config.max_prompt_tokens)
  base_url, url = config.base_url.rstrip("/"), config.base_url.rstrip("/") + config.endpoint
  api_key = config.api_key or os.environ.get(API_KEY_ENV, "")
  headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
  limit = config.max_concurrency or None
  offsets = arrival_offsets(len(requests), config.request_rate, config.burstiness, config.seed)
  semaphore = asyncio.Semaphore(limit) if limit else None
  outputs: list[RequestOutput | None] = [None] * len(requests)
  sent: set[int] = set()

  async with httpx.AsyncClient(timeout=httpx.Timeout(config.timeout_s), trust_env=False,
                               limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit)) as http:
    side_s = min(SIDE_READ_S, config.timeout_s, config.max_duration_s)   # /v1/models, /metrics: quick or nothing
    model = config.model or await _first_model(http, base_url, headers, side_s)
    if model is None:
      log(f"could not read a model name from {base_url}/v1/models: requests name none")

    def body(i: int, request: BenchRequest) -> dict:
      seed = config.seed + i if config.temperature > 0 else None
      return client.request_body(request, chat=config.chat, model=model, temperature=config.temperature,
                                 ignore_eos=config.ignore_eos, seed=seed)

    async def one(i: int, request: BenchRequest, start: float, deadline: float):
      await asyncio.sleep(max(0.0, start + offsets[i] - time.perf_counter()))
      async with semaphore or contextlib.nullcontext():
        if time.perf_counter() >= deadline:
          return
        sent.add(i)
        outputs[i] = await client.send(http, url, body(i, request), headers=headers, chat=config.chat,
                                       timeout_s=config.timeout_s, category=request.category)

    for _ in range(config.num_warmups if requests else 0):
      warm = await client.send(http, url, body(0, requests[0]), headers=headers, chat=config.chat,
                               timeout_s=config.timeout_s)
      if not warm.success:
        log(f"warmup request failed: {warm.error}")
    before = await server_metrics.fetch_spec_counters(http, base_url, headers, side_s)
    arrivals = ("all at once" if math.isinf(config.request_rate) else "Poisson process" if config.burstiness == 1
                else f"gamma gaps, burstiness {config.burstiness}")
    log(f"{len(requests)} requests to {url}; request rate {config.request_rate} ({arrivals}); "
        f"maximum concurrency {limit}")
    start = time.perf_counter()
    deadline = start + config.max_duration_s
    pending = [asyncio.create_task(one(i, r, start, deadline)) for i, r in enumerate(requests)]
    if pending:
      _, late = await asyncio.wait(pending, timeout=config.max_duration_s)
      for task in late:
        task.cancel()
      await asyncio.gather(*late, return_exceptions=True)
    duration = time.perf_counter() - start
    after = await server_metrics.fetch_spec_counters(http, base_url, headers, side_s)

  for i, request in enumerate(requests):
    if outputs[i] is None:
      what = "cancelled in flight" if i in sent else "not sent"
      outputs[i] = RequestOutput(error=f"{what}: the run's time limit (max_duration_s={config.max_duration_s}) passed",
                                 category=request.category)
  figures = metrics.calculate_metrics(outputs, duration, percentiles=config.metric_percentiles,
                                      percentile_metrics=config.percentile_metrics, goodput=config.goodput)
  return {
      "date": datetime.datetime.now().strftime("%Y%m%d-%H%M%S"), "backend": "openai-chat" if config.chat else "openai",
      "label": config.label, "base_url": base_url, "endpoint": config.endpoint, "model_id": model,
      "num_prompts": len(requests), "request_rate": _number(config.request_rate),
      "burstiness": _number(config.burstiness), "max_concurrency": limit, "temperature": config.temperature,
      "seed": config.seed, "goodput": config.goodput or None, "categories": list(config.categories),
      "duration": duration, **figures,
      "input_lens": [o.prompt_tokens for o in outputs], "output_lens": [o.output_tokens for o in outputs],
      "ttfts": [o.ttft for o in outputs], "itls": [o.itl for o in outputs], "latencies": [o.latency for o in outputs],
      "start_times": [None if o.start_time is None else o.start_time - start for o in outputs],
      "errors": [o.error for o in outputs], "request_categories": [o.category for o in outputs],
      "finish_reasons": [o.finish_reason for o in outputs], "spec_decode": [o.spec_decode for o in outputs],
      **metrics.spec_decode_summary(outputs), **server_metrics.spec_decode_delta(before, after),
  }


def run(config: BenchConfig, requests: list[BenchRequest] | None = None, log=print) -> dict:
  """`run_async` on a fresh event loop."""
  return asyncio.run(run_async(config, requests, log))


def result_path(config: BenchConfig, result: dict, result_dir: str = "", result_filename: str = "") -> str:
  """vLLM's file name, `{label}-{rate}qps[-concurrency{N}]-{model}-{date}.json`, unless one is given."""
  name = result_filename or (
      f"{config.label}-{result['request_rate']}qps"
      f"{f'-concurrency{config.max_concurrency}' if config.max_concurrency else ''}"
      f"-{(result.get('model_id') or 'model').split('/')[-1]}-{result['date']}.json")
  return os.path.join(result_dir, name) if result_dir else name


def save(result: dict, path: str) -> str:
  if os.path.dirname(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(result, f, indent=1)
  return path
