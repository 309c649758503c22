"""Offline q4 self-draft (K=4) against autoregressive decoding on SmolLM2-135M: four chat prompts, 128 new greedy
tokens, at each batch size five speculative calls, each paired with an autoregressive one. To compare two versions
of specjax, run it once per source tree in alternating processes (a tree's path as the first argument).

  python docs/diagnostics/q4_offline_pairs.py [SPECJAX_TREE] [BATCH ...]   (default: the installed specjax; 1 4)
"""

import os
import sys
import time

if len(sys.argv) > 1 and os.path.isdir(sys.argv[1]):
  sys.path.insert(0, sys.argv.pop(1))

import specjax  # noqa: E402
from specjax.cli import model_from_source  # noqa: E402
from specjax.drafters import QuantizedDraft  # noqa: E402
from specjax.sampling import GREEDY  # noqa: E402

TEXTS = ("Write a Python function that checks whether a string is a palindrome.",
         "Explain why the sky is blue in three sentences.",
         "List five uses of a hash map, as JSON.",
         "Summarize the history of the printing press.")
PAIRS = 5


def main(batches):
  print("specjax from", os.path.dirname(specjax.__file__))
  specjax.enable_compilation_cache()
  target = model_from_source("smollm2-135m", "")
  prompts = [list(target.tokenizer.apply_chat_template([{"role": "user", "content": t}])) for t in TEXTS]
  drafter = QuantizedDraft.from_model(target, "q4")
  for batch in batches:
    def generate(**kwargs):
      return specjax.generate(target, prompts[:batch], max_new_tokens=128, sampling=GREEDY, stop_at_eos=False,
                              **kwargs)
    assert generate().tokens == generate(drafter=drafter, k=4).tokens   # compiled both, and exact
    seconds, ratios = [], []
    for _ in range(PAIRS):
      start = time.perf_counter()
      generate()
      middle = time.perf_counter()
      result = generate(drafter=drafter, k=4)
      end = time.perf_counter()
      seconds.append(end - middle)
      ratios.append((middle - start) / (end - middle))
    print(f"batch {batch}: speculative s per call " + " ".join(f"{s:.2f}" for s in seconds) +
          "  speedup over autoregressive " + " ".join(f"{r:.2f}" for r in ratios) +
          f"  tokens per round {result.stats.mean_tokens_per_round:.2f}", flush=True)


if __name__ == "__main__":
  main([int(b) for b in sys.argv[1:]] or [1, 4])
