"""Paired in-process comparison of two serving engines on the load sweep's workload: autoregressive against the
adaptive policy (q4 self-draft) on SmolLM2-135M, each concurrency's requests run on one engine then the other,
`PAIRS` times, alternating which goes first. What the HTTP sweep's single cells cannot separate from the machine's
noise: what the adaptive engine costs (or gains) per burst, measured in the same process minutes apart.

  python docs/diagnostics/engine_paired.py [CONCURRENCY ...]   (default 1 4 16)
"""

import statistics
import sys
import time

import numpy as np

import specjax
from specjax.benchmark.serving.workload import build_requests
from specjax.cli import drafter_from_config, model_from_source
from specjax.sampling import GREEDY
from specjax.serving import Engine, Request

PAIRS = 3
SLOTS = 16
MAX_MODEL_LEN = 2048
WARM_PROMPT_LENGTHS = (33, 65, 129, 257, 513, 1025)   # the sweep's prompt buckets (64 ... 2048 tokens)


def run_burst(engine: Engine, prompts, output_lens, concurrency: int) -> tuple[float, int, list[float]]:
  """All requests, at most `concurrency` in flight (a new one as one finishes, like the sweep's client); returns the
  wall seconds, the output tokens and each request's time per output token after the first."""
  pending, running, done = list(zip(prompts, output_lens)), [], []
  start = time.perf_counter()
  while pending or running:
    while pending and len(running) < concurrency:
      ids, n = pending.pop(0)
      running.append(engine.submit(Request(ids, max_tokens=n, sampling=GREEDY)))
    engine.step()
    done += [h for h in running if h.finished]
    running = [h for h in running if not h.finished]
  seconds = time.perf_counter() - start
  stats = [h.result().stats for h in done]
  tpot = [(s.total_s - s.first_token_s) / (s.completion_tokens - 1) for s in stats if s.completion_tokens > 1]
  return seconds, sum(s.completion_tokens for s in stats), tpot


def main(concurrencies):
  specjax.enable_compilation_cache()
  target = model_from_source("smollm2-135m", "")
  engines = {"autoregressive": Engine(target, slots=SLOTS, max_model_len=MAX_MODEL_LEN),
             "adaptive": Engine(target, drafter=drafter_from_config("quantized", target, "q4"), k="auto",
                                slots=SLOTS, max_model_len=MAX_MODEL_LEN)}
  for name, engine in engines.items():
    start = time.perf_counter()
    engine.warmup(samplings=(GREEDY,), prompt_lengths=WARM_PROMPT_LENGTHS, admit_rows=(1, 2, 4, 8))
    print(f"{name}: warmup {time.perf_counter() - start:.0f} s", flush=True)
  for concurrency in concurrencies:
    requests = build_requests(num_prompts=concurrency if concurrency > 1 else 8, seed=0)
    prompts = [tuple(target.tokenizer.apply_chat_template([{"role": "user", "content": r.prompt}])) for r in requests]
    lens = [r.output_len for r in requests]
    for engine in engines.values():   # untimed: the first burst of a shape pays its host-side caches
      run_burst(engine, prompts, [2] * len(prompts), concurrency)
    results = {name: [] for name in engines}
    for pair in range(PAIRS):
      order = list(engines) if pair % 2 == 0 else list(engines)[::-1]
      for name in order:
        results[name].append(run_burst(engines[name], prompts, lens, concurrency))
    tok_s = {name: [tokens / seconds for seconds, tokens, _ in runs] for name, runs in results.items()}
    ratios = [a / b for a, b in zip(tok_s["adaptive"], tok_s["autoregressive"])]
    for name, runs in results.items():
      tpot = np.concatenate([np.asarray(t) for _, _, t in runs])
      print(f"c={concurrency:2d} {name:15s} output tok/s " + " ".join(f"{x:6.1f}" for x in tok_s[name]) +
            f"  median TPOT {1e3 * np.median(tpot):.1f} ms, p99 {1e3 * np.percentile(tpot, 99):.1f} ms", flush=True)
    print(f"c={concurrency:2d} adaptive / autoregressive per pair: " + " ".join(f"{r:.2f}" for r in ratios) +
          f" (median {statistics.median(ratios):.2f})", flush=True)


if __name__ == "__main__":
  main([int(c) for c in sys.argv[1:]] or [1, 4, 16])
