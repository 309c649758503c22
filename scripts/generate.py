"""Generate text (autoregressive and speculative) and print tokens/s.

  python scripts/generate.py --config=configs/smollm2_135m.py --config.drafter=prompt_lookup --config.k=4
  python scripts/generate.py --config=configs/smollm2_135m.py --config.drafter=feature_head \
      --config.draft_model=shipped --config.tree=dynamic:8,4,4      # a token tree each round instead of K drafts

Multi-host (one process per host, same command everywhere; on TPU VMs the cluster is auto-detected, see docs/tpu.md):
  python scripts/generate.py --config=... --config.mesh=1x8 --coordinator_address=HOST0:8476 --num_processes=2 \
      --process_id=0
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from specjax import memory  # noqa: E402

memory.cap_malloc_arenas()   # before XLA starts its threads: a peak of 1.57-1.59 GiB against 1.70 (compiling anew)

import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import app  # noqa: E402
from ml_collections import config_flags  # noqa: E402

import specjax  # noqa: E402
from specjax import distributed  # noqa: E402
from specjax.kernels import packed  # noqa: E402
from specjax.cache import cache_size  # noqa: E402
from specjax.host import prompt_bucket  # noqa: E402
from specjax.cli import drafter_from_config, mesh_from_string, model_from_source, tree_from_string  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", "configs/smollm2_135m.py", "generation config")
distributed.define_flags()


def _generate(target, prompts, config, drafter, mesh, calibration, tree=None):
  k = None if drafter is None or tree is not None else ("auto" if config.get("adaptive", False) else config.k)
  return specjax.generate(target, prompts, max_new_tokens=config.max_new_tokens, seed=config.seed, drafter=drafter,
                          k=k, mesh=mesh, calibration=calibration, chat=config.chat and target.tokenizer is not None,
                          tree=tree if drafter is not None else None,
                          sampling=specjax.SamplingParams(config.temperature, config.top_k, config.top_p))


def _rate(result) -> float:
  return sum(len(t) for t in result.tokens) / result.stats.wall_time_s


def main(argv):
  del argv
  distributed.initialize_from_flags()  # before anything touches devices
  config = _CONFIG.value
  specjax.enable_compilation_cache()
  target = model_from_source(config.model, config.dtype)
  prompts = list(config.prompts)
  if target.tokenizer is None:
    prompts = [[int(t) for t in p.split()] for p in prompts]
  mesh = mesh_from_string(config.mesh)
  drafter = drafter_from_config(config.drafter, target, config.draft_model)
  tree = tree_from_string(config.get("tree", ""))
  if tree is not None and (drafter is None or config.get("adaptive", False)):
    raise ValueError(f"config.tree={config.tree!r} needs a drafter and a fixed K (adaptive=False): a tree is drafted "
                     f"and verified every round")
  print(f"model {config.model}: {target.config.param_count() / 1e6:.1f}M parameters, {target.config.dtype}")
  runs = []
  if config.compare_autoregressive or drafter is None:
    runs.append(("autoregressive", None))
  if drafter is not None:
    shape = (f"tree={config.tree}" if tree is not None
             else f"k={'auto' if config.get('adaptive', False) else config.k}")
    runs.append((f"speculative ({config.drafter}, {shape})", drafter))
  calibration = specjax.Calibration()  # adaptive round costs: measured once, used by every call
  first_s = {label: _generate(target, prompts, config, d, mesh, calibration, tree).stats.wall_time_s
             for label, d in runs}
  # Timed calls alternate between the runs (the order flips every repeat), so drift on a shared machine moves both
  # alike; the ratio is the median of the per-repeat ratios.
  rates, results = {label: [] for label, _ in runs}, {}
  for repeat in range(config.repeats):
    for label, run_drafter in (runs if repeat % 2 == 0 else runs[::-1]):
      results[label] = _generate(target, prompts, config, run_drafter, mesh, calibration, tree)
      rates[label].append(_rate(results[label]))
  for label, run_drafter in runs:
    result = results[label]
    print(f"\n== {label}: {np.median(rates[label]):.1f} tokens/s (batch {len(prompts)}, median of {config.repeats} "
          f"calls; first call incl. compile {first_s[label]:.1f} s; time to first token "
          f"{1e3 * result.stats.first_token_s:.0f} ms)")
    if run_drafter is not None:
      print(f"   accepted drafts per round {result.stats.mean_accepted_per_round:.2f}, tokens per round "
            f"{result.stats.mean_tokens_per_round:.2f}, acceptance rate {result.stats.acceptance_rate:.2f}")
    for row, tokens in enumerate(result.tokens):
      text = result.texts[row] if result.texts else " ".join(map(str, tokens))
      print(f"-- [{row}] {text!r}")
  if len(runs) == 2:
    ar, spec = (rates[label] for label, _ in runs)
    print(f"\nspeculative / autoregressive: {np.median(np.divide(spec, ar)):.2f}x (median of {config.repeats} "
          f"alternated pairs, same prompts)")
  longest = max(len(p) for p in result.prompt_tokens)
  size = cache_size(max(prompt_bucket(longest), longest + config.max_new_tokens
                                                  + (tree.slots if tree is not None else result.stats.k)))
  peak = memory.peak_resident_bytes()
  draft = 0  # the drafter's parameters and, for a draft model that does not draft in the target's, its own cache
  if drafter is not None:
    draft = sum(getattr(x, "nbytes", 0) for x in jax.tree.leaves(drafter.params()))
    if getattr(drafter, "model", None) is not None and not drafter.shares_target_cache:
      draft += memory.cache_bytes(drafter.model.config, len(prompts), size)
  cache = memory.cache_bytes(target.config, len(prompts), size)
  params = target.param_bytes + packed.view_bytes(target)  # the CPU kernels' tiles are a second copy
  budget = memory.budget_bytes(params + draft, target.config, len(prompts), size)
  print(f"peak resident memory {peak / memory.GiB:.2f} GiB; parameters {params / memory.GiB:.2f} GiB + "
        f"draft {draft / memory.GiB:.2f} GiB + cache {cache / memory.GiB:.3f} GiB + 1 GiB = "
        f"{budget / memory.GiB:.2f} GiB ({'within' if peak <= budget else 'OVER'} budget)")


if __name__ == "__main__":
  app.run(main)
