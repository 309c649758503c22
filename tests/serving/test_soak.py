"""A soak of the OpenAI server on loopback (the tiny random model of configs/serve_tiny.py, 16 slots, prompt lookup at
K=3): 200 streamed completions at concurrency 16, a seeded tenth of them cancelled mid-stream by the client closing
its connection. Every other request returns exactly max_tokens tokens (greedy: the same tokens for the same prompt,
whatever else was served), the server ends idle with every slot free, /metrics adds up, and memory stays flat between
the first hundred requests (programs compiled) and the second."""

import asyncio
import dataclasses
import gc
import json
import sys
import time

import httpx
import jax
import numpy as np
import pytest

from configs import serve_tiny
from serving.test_server import _serving  # uvicorn in a thread on a free loopback port
from specjax.serving.configured import build_engine
from specjax.serving.request import RequestHandle
from specjax.serving.server import create_app

SLOTS = 16
CONCURRENCY = 16
REQUESTS = 200
CANCELLED = 20
LONG = 200            # max_tokens of a request its client cancels: still running when the client leaves
TIME_LIMIT_S = 240    # the whole soak; a server that stops answering fails it by then (each read times out at 60 s)
# What a leak of one slot's row per request would leave after a hundred requests: 100 x 192 KiB (its KV cache alone:
# 384 positions x 2 layers x (k, v) x 2 KV heads x 16 dims x 4 bytes) = 19 MiB in at least 600 device arrays (a row
# is several arrays). The live-array bounds catch it exactly; they leave room for the state's row bucket at idle
# (a smaller state while the load is low). RSS also moves with the small programs compiled at a first bucket change
# (5-10 MiB each) and the allocator: its bound is a backstop against gross leaks (a 16-row state per request).
MAX_LIVE_ARRAYS_GROWTH = 50
MAX_LIVE_BYTES_GROWTH = 4 << 20
MAX_RSS_GROWTH = 64 << 20


@dataclasses.dataclass(frozen=True)
class Job:
  prompt: list
  max_tokens: int
  cancel_after: int   # stream chunks the client reads before it closes the connection (0: reads to the end)


@dataclasses.dataclass
class Result:
  token_ids: list
  finish_reason: str | None
  usage: dict | None
  done: bool          # [DONE] arrived


def _jobs(seed: int = 0) -> list[Job]:
  """25 prompts of 1..47 token ids, each asked several times; a seeded tenth cancelled after 1 or 2 chunks."""
  rng = np.random.default_rng(seed)
  prompts = [rng.integers(0, 256, n).tolist() for n in rng.integers(1, 48, 25)]
  cancelled = set(rng.choice(REQUESTS, CANCELLED, replace=False).tolist())
  return [Job(prompts[rng.integers(len(prompts))], LONG if i in cancelled else int(rng.integers(4, 25)),
              int(rng.integers(1, 3)) if i in cancelled else 0) for i in range(REQUESTS)]


async def _stream(client: httpx.AsyncClient, url: str, job: Job) -> Result:
  """One streamed completion; a job with `cancel_after` returns (closing the connection) after that many chunks."""
  body = {"prompt": job.prompt, "max_tokens": job.max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
          "stream_options": {"include_usage": True}, "return_token_ids": True}
  result = Result([], None, None, False)
  async with client.stream("POST", url + "/v1/completions", json=body) as reply:
    assert reply.status_code == 200, (await reply.aread()).decode()
    chunks = 0
    async for line in reply.aiter_lines():
      if not line.startswith("data: "):
        continue
      if line == "data: [DONE]":
        result.done = True
        break
      event = json.loads(line[6:])
      assert "error" not in event, event
      if event["choices"]:
        result.token_ids += event["choices"][0]["token_ids"]
        result.finish_reason = event["choices"][0]["finish_reason"] or result.finish_reason
      else:
        result.usage = event["usage"]
      chunks += 1
      if chunks == job.cancel_after:
        break
  return result


def _rss() -> int:
  with open("/proc/self/status") as status:
    return next(int(line.split()[1]) << 10 for line in status if line.startswith("VmRSS:"))


@dataclasses.dataclass(frozen=True)
class Memory:
  rss: int
  live_arrays: int
  live_bytes: int


def _memory() -> Memory:
  gc.collect()
  live = jax.live_arrays()
  return Memory(_rss(), len(live), sum(a.nbytes for a in live))


async def _idle(client: httpx.AsyncClient, url: str, since: float, seconds: float = 30.0) -> None:
  """Waits until /health reports nothing running or waiting and no handle of a request submitted since `since`
  (perf_counter) is alive: nothing of a request outlives it."""
  deadline = time.monotonic() + seconds
  while True:
    health = (await client.get(url + "/health")).json()
    gc.collect()
    handles = sum(type(o) is RequestHandle and o.submitted_at >= since for o in gc.get_objects())
    if health["running"] == 0 and health["waiting"] == 0 and handles == 0:
      return
    assert time.monotonic() < deadline, f"not idle after the requests: {health}, {handles} request handles alive"
    await asyncio.sleep(0.1)


async def _soak(url: str, jobs: list[Job]) -> tuple[list[Result], list[Memory]]:
  """The jobs in two halves at CONCURRENCY; the memory after each, once the server is idle."""
  gate, since = asyncio.Semaphore(CONCURRENCY), time.perf_counter()
  limits = httpx.Limits(max_connections=2 * CONCURRENCY)
  async with httpx.AsyncClient(timeout=60, limits=limits) as client:

    async def one(job):
      async with gate:
        return await _stream(client, url, job)

    results, memory = [], []
    for half in (jobs[:len(jobs) // 2], jobs[len(jobs) // 2:]):
      results += await asyncio.gather(*map(one, half))
      await _idle(client, url, since)
      memory.append(_memory())
  return results, memory


def _metrics(url: str) -> dict:
  values = {}
  for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
    if line and not line.startswith("#"):
      name, value = line.rsplit(" ", 1)
      values[name.replace('model_name="tiny",', "").replace('{model_name="tiny"}', "")] = float(value)
  return values


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_200_streams_with_disconnects_leave_no_slot_or_memory_behind():
  config = serve_tiny.get_config()
  config.slots = SLOTS
  engine, name, method = build_engine(config)
  engine.warmup(prompt_lengths=(1, 17, 33))   # as serve.py does: the prompt buckets of the jobs
  jobs = _jobs()
  started = time.monotonic()
  with _serving(create_app(engine, name, method=method)) as url:
    results, (warm, end) = asyncio.run(asyncio.wait_for(_soak(url, jobs), TIME_LIMIT_S))
    print(f"\nsoak: {time.monotonic() - started:.1f} s; after 100 / 200 requests: RSS {warm.rss / 2**20:.1f} / "
          f"{end.rss / 2**20:.1f} MiB, live device arrays {warm.live_arrays} / {end.live_arrays} "
          f"({warm.live_bytes / 2**20:.2f} / {end.live_bytes / 2**20:.2f} MiB)")
    assert engine.free_slots() == SLOTS and engine.num_running == 0 and engine.num_waiting == 0
    metrics = _metrics(url)
  assert not engine.alive

  longest = {}   # prompt -> its longest completion: greedy, so every other one of that prompt is its prefix
  for job, result in zip(jobs, results):
    if job.cancel_after:
      assert not result.done and 0 < len(result.token_ids) < job.max_tokens
    else:
      assert result.done and result.finish_reason == "length" and len(result.token_ids) == job.max_tokens
      assert result.usage == {"prompt_tokens": len(job.prompt), "completion_tokens": job.max_tokens,
                              "total_tokens": len(job.prompt) + job.max_tokens}
    short, long = sorted((longest.get(tuple(job.prompt), []), result.token_ids), key=len)
    assert long[:len(short)] == short, "one prompt, different greedy tokens"
    longest[tuple(job.prompt)] = long

  completed = REQUESTS - CANCELLED
  assert metrics['vllm:request_success_total{finished_reason="length"}'] == completed
  assert metrics['vllm:request_success_total{finished_reason="cancelled"}'] == CANCELLED
  assert metrics["vllm:num_requests_running"] == 0 and metrics["vllm:num_requests_waiting"] == 0
  assert metrics["vllm:prompt_tokens_total"] == sum(len(job.prompt) for job in jobs)
  served = sum(len(r.token_ids) for r in results)
  assert served <= metrics["vllm:generation_tokens_total"] < served + CANCELLED * LONG
  assert metrics["vllm:spec_decode_num_draft_tokens_total"] == 3 * metrics["vllm:spec_decode_num_drafts_total"] > 0
  assert metrics["specjax:requests_rejected_queue_full_total"] == 0

  assert end.live_arrays - warm.live_arrays < MAX_LIVE_ARRAYS_GROWTH, (warm, end)
  assert end.live_bytes - warm.live_bytes < MAX_LIVE_BYTES_GROWTH, (warm, end)
  assert end.rss - warm.rss < MAX_RSS_GROWTH, (warm, end)
