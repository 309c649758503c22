"""Generate text (autoregressive and speculative) and print tokens/s.

  python scripts/generate.py --config=configs/smollm2_135m.py --config.drafter=prompt_lookup --config.k=4
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

import specjax  # noqa: E402
from specjax.cli import drafter_from_config, mesh_from_string, model_from_source  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", "configs/smollm2_135m.py", "generation config")


def _timed(target, prompts, config, drafter, mesh):
  kwargs = dict(max_new_tokens=config.max_new_tokens, seed=config.seed, drafter=drafter, k=config.k, mesh=mesh,
                chat=config.chat and target.tokenizer is not None,
                sampling=specjax.SamplingParams(config.temperature, config.top_k, config.top_p))
  first = specjax.generate(target, prompts, **kwargs)  # includes compilation
  timed = specjax.generate(target, prompts, **kwargs)
  n_tokens = sum(len(t) for t in timed.tokens)
  return timed, n_tokens / timed.stats.wall_time_s, first.stats.wall_time_s


def main(argv):
  del argv
  config = _CONFIG.value
  specjax.enable_compilation_cache()
  target = model_from_source(config.model, config.dtype)
  prompts = list(config.prompts)
  if target.tokenizer is None:
    prompts = [[int(t) for t in p.split()] for p in prompts]
  mesh = mesh_from_string(config.mesh)
  drafter = drafter_from_config(config.drafter, target, config.draft_model)
  print(f"model {config.model}: {target.config.param_count() / 1e6:.1f}M parameters, {target.config.dtype}")
  runs = []
  if config.compare_autoregressive or drafter is None:
    runs.append(("autoregressive", None))
  if drafter is not None:
    runs.append((f"speculative ({config.drafter}, k={config.k})", drafter))
  rates = {}
  for label, run_drafter in runs:
    result, rate, first_s = _timed(target, prompts, config, run_drafter, mesh)
    rates[label] = rate
    print(f"\n== {label}: {rate:.1f} tokens/s (batch {len(prompts)}; first call incl. compile {first_s:.1f} s)")
    if run_drafter is not None:
      print(f"   accepted drafts per round {result.stats.mean_accepted_per_round:.2f}, tokens per round "
            f"{result.stats.mean_tokens_per_round:.2f}, acceptance rate {result.stats.acceptance_rate:.2f}")
    for row, tokens in enumerate(result.tokens):
      text = result.texts[row] if result.texts else " ".join(map(str, tokens))
      print(f"-- [{row}] {text!r}")
  if len(rates) == 2:
    ar, spec = rates.values()
    print(f"\nspeculative / autoregressive: {spec / ar:.2f}x (same run, same prompts)")


if __name__ == "__main__":
  app.run(main)
