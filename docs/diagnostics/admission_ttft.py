"""Time to first token of one request on an idle autoregressive serving engine, by prompt length: the admission
program (the prompt's prefill in chunks of 128 positions, the first token, the row written into its slot) on
SmolLM2-135M at max_model_len 2048, the sweep's engine shape. Best and all of REPEATS calls per length.

  python docs/diagnostics/admission_ttft.py [PROMPT_LENGTH ...]   (default 64 128 256 512 896)
"""

import sys
import time

import specjax
from specjax.cli import model_from_source
from specjax.sampling import GREEDY
from specjax.serving import Engine, Request

REPEATS = 4


def main(lengths):
  specjax.enable_compilation_cache()
  target = model_from_source("smollm2-135m", "")
  engine = Engine(target, slots=16, max_model_len=2048)
  engine.warmup(samplings=(GREEDY,), prompt_lengths=tuple(lengths), admit_rows=(1,), all_buckets=False)
  for n in lengths:
    ids = [1 + (i * 7919) % (target.config.vocab_size - 1) for i in range(n)]   # no token repeated in a row
    seconds = []
    for _ in range(REPEATS):
      start = time.perf_counter()
      handle = engine.submit(Request(ids, max_tokens=1, sampling=GREEDY))
      while not handle.finished:
        engine.step()
      seconds.append(time.perf_counter() - start)
    print(f"prompt {n:4d}: TTFT best {1e3 * min(seconds):.0f} ms ({n / min(seconds):.0f} prompt tokens/s), all "
          f"{[round(1e3 * s) for s in seconds]} ms", flush=True)


if __name__ == "__main__":
  main([int(arg) for arg in sys.argv[1:]] or [64, 128, 256, 512, 896])
