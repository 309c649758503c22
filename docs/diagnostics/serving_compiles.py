"""What compiles while serving: one warmed engine (the sweep server's warmup) runs the load sweep's cells in order,
twice, with `jax_log_compiles` on, and each cell prints its throughput and the programs XLA compiled during it. After
a complete warmup every cell should print none (results section 26: 22 `write_rows` compiled over the first pass).

  python docs/diagnostics/serving_compiles.py [adaptive|autoregressive]   (default adaptive)
"""

import logging
import sys
import time

import jax

import specjax
from specjax.benchmark.serving.workload import build_requests
from specjax.cli import drafter_from_config, model_from_source
from specjax.sampling import GREEDY
from specjax.serving import Engine

from engine_paired import MAX_MODEL_LEN, SLOTS, WARM_PROMPT_LENGTHS, run_burst

CELLS = ((1, 8), (2, 8), (4, 8), (8, 16), (16, 32))   # (concurrency, requests), as configs/bench_serve_sweep.py


class Compilations(logging.Handler):
  """Collects the names of the programs XLA finished compiling."""

  def __init__(self):
    super().__init__(logging.DEBUG)
    self.names = []

  def emit(self, record):
    message = record.getMessage()
    if message.startswith("Finished XLA compilation of "):
      self.names.append(message.split(" of ", 1)[1].split(" in ")[0])


def main(kind: str):
  specjax.enable_compilation_cache()
  target = model_from_source("smollm2-135m", "")
  drafter = dict(drafter=drafter_from_config("quantized", target, "q4"), k="auto") if kind == "adaptive" else {}
  engine = Engine(target, slots=SLOTS, max_model_len=MAX_MODEL_LEN, **drafter)
  start = time.perf_counter()
  engine.warmup(samplings=(GREEDY,), prompt_lengths=WARM_PROMPT_LENGTHS, admit_rows=(1, 2, 4, 8))
  print(f"{kind}: warmup {time.perf_counter() - start:.0f} s", flush=True)
  compiled = Compilations()
  jax.config.update("jax_log_compiles", True)
  logging.getLogger("jax").addHandler(compiled)
  for repeat in range(2):
    for concurrency, count in CELLS:
      requests = build_requests(num_prompts=count, seed=0)
      prompts = [tuple(target.tokenizer.apply_chat_template([{"role": "user", "content": r.prompt}]))
                 for r in requests]
      compiled.names.clear()
      seconds, tokens, _ = run_burst(engine, prompts, [r.output_len for r in requests], concurrency)
      print(f"repeat {repeat} c={concurrency:2d}: {tokens / seconds:6.1f} tok/s, {len(compiled.names)} compiled "
            f"{sorted(set(compiled.names))}", flush=True)


if __name__ == "__main__":
  main(sys.argv[1] if len(sys.argv) > 1 else "adaptive")
