"""A first look at static trees on SmolLM2 with the q4 self-draft (docs/results.md section 15): autoregressive,
the chain at K=4 and two static trees, two prompts, greedy and temperature 1, 96 new tokens, median of 3 calls
(not paired: a first look, the benchmark's tree cells are still to come).

  python docs/diagnostics/tree_vs_chain.py
"""
import numpy as np

import specjax
from specjax.cli import drafter_from_config, model_from_source
from specjax.trees.static import StaticTree

target = model_from_source("smollm2-135m")
draft = drafter_from_config("quantized", target, "q4")
prompts = ["Write a Python function that checks whether a string is a palindrome.",
           "Write a short story about a lighthouse keeper who finds a message in a bottle."]
methods = {"ar": {}, "chain K=4": {"drafter": draft, "k": 4},
           "tree of 8": {"drafter": draft, "tree": StaticTree(((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0),
                                                               (0, 0, 1), (0, 0, 0, 0)))},
           "chain of 4 + 2": {"drafter": draft, "tree": StaticTree(((0,), (1,), (0, 0), (0, 0, 0), (0, 0, 0, 0),
                                                                    (0, 1)))}}
for sampling in (specjax.SamplingParams(temperature=0.0), specjax.SamplingParams(temperature=1.0)):
  for prompt in prompts:
    row = {}
    for name, kwargs in methods.items():
      specjax.generate(target, [prompt], max_new_tokens=8, sampling=sampling, chat=True, **kwargs)  # compiles
      runs = [specjax.generate(target, [prompt], max_new_tokens=96, sampling=sampling, chat=True, seed=seed, **kwargs)
              for seed in range(3)]
      row[name] = (float(np.median([r.stats.wall_time_s for r in runs])), runs[-1].stats.mean_tokens_per_round)
    print(f"T={sampling.temperature} {prompt[:24]!r}: " + ", ".join(
        f"{name} {row['ar'][0] / wall:.2f}x ({per_round:.2f} tok/round)" for name, (wall, per_round) in row.items()))
