"""Paired in-process comparison of the serving engine with and without pipelined steps (`Slots.advance`: a step is
dispatched before the last one's readout is taken), autoregressive SmolLM2-135M at concurrency 1 on the load
sweep's prompts, the engines stepped by this script (no HTTP server), alternating which runs first.

  python docs/diagnostics/pipelined_steps.py [PAIRS]   (default 3)
"""

import importlib.util
import pathlib
import statistics
import sys

import numpy as np

import specjax
from specjax.benchmark.serving.workload import build_requests
from specjax.cli import model_from_source
from specjax.sampling import GREEDY
from specjax.serving import Engine

_spec = importlib.util.spec_from_file_location("engine_paired", pathlib.Path(__file__).with_name("engine_paired.py"))
engine_paired = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(engine_paired)


def main(pairs: int) -> None:
  specjax.enable_compilation_cache()
  target = model_from_source("smollm2-135m", "")
  engines = {pipeline: Engine(target, slots=4, max_model_len=2048, pipeline=pipeline) for pipeline in (True, False)}
  requests = build_requests(num_prompts=6, seed=0)
  prompts = [tuple(target.tokenizer.apply_chat_template([{"role": "user", "content": r.prompt}])) for r in requests]
  lens = [min(r.output_len, 96) for r in requests]
  for engine in engines.values():
    engine.warmup(samplings=(GREEDY,), prompt_lengths=sorted({len(p) for p in prompts}), admit_rows=(1,))
    engine_paired.run_burst(engine, prompts, [2] * len(prompts), 1)   # untimed: host-side caches
  results = {pipeline: [] for pipeline in engines}
  for pair in range(pairs):
    for pipeline in ((True, False) if pair % 2 == 0 else (False, True)):
      results[pipeline].append(engine_paired.run_burst(engines[pipeline], prompts, lens, 1))
  tok_s = {pipeline: [tokens / seconds for seconds, tokens, _ in runs] for pipeline, runs in results.items()}
  for pipeline, runs in results.items():
    tpot = np.concatenate([np.asarray(t) for _, _, t in runs])
    print(f"pipeline={pipeline}: output tok/s " + " ".join(f"{x:.1f}" for x in tok_s[pipeline]) +
          f", median TPOT {1e3 * np.median(tpot):.2f} ms")
  ratios = [a / b for a, b in zip(tok_s[True], tok_s[False])]
  print("pipelined / not, per pair: " + " ".join(f"{r:.3f}" for r in ratios) +
        f" (median {statistics.median(ratios):.3f})")


if __name__ == "__main__":
  main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
