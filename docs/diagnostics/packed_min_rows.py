"""The packed kernel from the calibrated row count against the packed kernel from one row (docs/results.md section
43): SmolLM2-135M loaded twice, one packed view timed by `specjax.kernels.packed.calibrate`, the other with every
kernel's min_rows 1; greedy `specjax.generate` on the first prompt of each category, autoregressive, the q4
self-draft at K=4 and the shipped feature head at K=3, the two models alternated in PAIRS pairs after a warm call.

  python docs/diagnostics/packed_min_rows.py
"""

import os
import statistics
import time

import specjax
from specjax.benchmark import tasks
from specjax.cli import drafter_from_config
from specjax.engine import params_for
from specjax.kernels import packed
from specjax.spec import TargetSpec

PAIRS, NEW_TOKENS = 3, 64
METHODS = (("ar", "none", "", 0), ("q4 K=4", "quantized", "q4", 4), ("feature head K=3", "feature_head", "shipped", 3))


def view(model, min_rows: str | None):
  """The model's packed view, made (and cached) under SPECJAX_PACKED_MIN_ROWS=min_rows (None: calibrated)."""
  if min_rows:
    os.environ[packed.MIN_ROWS_ENV] = min_rows
  try:
    return packed.view_min_rows(params_for(model, TargetSpec(graphdef=model.graphdef)))
  finally:
    os.environ.pop(packed.MIN_ROWS_ENV, None)


def main():
  os.environ.pop(packed.MIN_ROWS_ENV, None)
  models = {"calibrated": specjax.load_model("smollm2-135m"), "from 1 row": specjax.load_model("smollm2-135m")}
  print({name: view(m, None if name == "calibrated" else "1") for name, m in models.items()}, "min rows")
  greedy = specjax.SamplingParams(temperature=0.0)
  for label, kind, source, k in METHODS:
    drafters = {name: drafter_from_config(kind, m, source) if kind != "none" else None for name, m in models.items()}
    for cat in tasks.CATEGORIES:
      prompt = tasks.select(cat, 1)[0]["prompt"]
      seconds = {name: [] for name in models}
      for pair in range(PAIRS + 1):
        order = list(models) if pair % 2 == 0 else list(models)[::-1]
        for name in order:
          start = time.perf_counter()
          out = specjax.generate(models[name], [prompt], chat=True, max_new_tokens=NEW_TOKENS, sampling=greedy,
                                 drafter=drafters[name], k=k or None)
          if pair:  # the first pair compiles
            seconds[name].append((time.perf_counter() - start) / len(out.tokens[0]))
      ratios = [a / b for a, b in zip(seconds["from 1 row"], seconds["calibrated"])]
      print(f"{label:17s} {cat:13s} ms/token calibrated {1e3 * statistics.median(seconds['calibrated']):6.2f}, "
            f"from 1 row {1e3 * statistics.median(seconds['from 1 row']):6.2f}; speedup per pair "
            f"{', '.join(f'{r:.2f}' for r in ratios)}")


if __name__ == "__main__":
  main()
