"""Paired in-process comparison of two serving engines on the load sweep's workload: autoregressive against the
adaptive policy (q4 self-draft) on SmolLM2-135M, each concurrency's requests run on one engine then the other,
`PAIRS` times, alternating which goes first. What the HTTP sweep's single cells cannot separate from the machine's
noise: what the adaptive engine costs (or gains) per burst, measured in the same process minutes apart.

  python docs/diagnostics/engine_paired.py [CONCURRENCY ...] [--against=k4] [--contender=k4] [--slots=N]
                                                                                            (default 1 4 16)

--against=k4 sets the adaptive engine against the fixed K=4 one (same drafter) instead of the autoregressive one;
--contender=k4 sets the fixed K=4 engine against the autoregressive one.
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


def _engine(name: str, target, draft, slots: int) -> Engine:
  k = {"autoregressive": None, "k4": 4, "adaptive": "auto"}[name]
  return Engine(target, drafter=None if k is None else draft, k=k, slots=slots, max_model_len=MAX_MODEL_LEN)


def main(concurrencies, against="autoregressive", contender="adaptive", slots=SLOTS):
  specjax.enable_compilation_cache()
  target = model_from_source("smollm2-135m", "")
  draft = drafter_from_config("quantized", target, "q4")
  engines = {against: _engine(against, target, draft, slots), contender: _engine(contender, target, draft, slots)}
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
    ratios = [a / b for a, b in zip(tok_s[contender], tok_s[against])]
    for name, runs in results.items():
      tpot = np.concatenate([np.asarray(t) for _, _, t in runs])
      print(f"c={concurrency:2d} {name:15s} output tok/s " + " ".join(f"{x:6.1f}" for x in tok_s[name]) +
            f"  median TPOT {1e3 * np.median(tpot):.1f} ms, p99 {1e3 * np.percentile(tpot, 99):.1f} ms", flush=True)
    print(f"c={concurrency:2d} {contender} / {against} per pair: " + " ".join(f"{r:.2f}" for r in ratios) +
          f" (median {statistics.median(ratios):.2f}); served ms per round {engines[contender].served_round_ms}",
          flush=True)


if __name__ == "__main__":
  options = dict(arg[2:].split("=", 1) for arg in sys.argv[1:] if arg.startswith("--"))
  against, contender = options.get("against", "autoregressive"), options.get("contender", "adaptive")
  if (set(options) - {"against", "contender", "slots"} or against not in ("k4", "autoregressive")
          or contender not in ("k4", "adaptive") or against == contender):
    raise SystemExit(__doc__)
  main([int(c) for c in sys.argv[1:] if not c.startswith("--")] or [1, 4, 16], against=against,
       contender=contender, slots=int(options.get("slots", SLOTS)))
