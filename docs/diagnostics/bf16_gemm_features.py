"""The target's feature pass on bfloat16 operands (`CorpusConfig.feature_gemm="bfloat16"`) against float32: tokens a
minute (alternated pairs on the same batches), how far the features move, and whether a trained feature head reads
them as it reads the float32 ones (teacher-forced top-1 on the target's greedy answers to benchmark prompts).

  python docs/diagnostics/bf16_gemm_features.py [pairs] [prompts_per_category]
"""

import dataclasses
import sys
import time

import jax
import numpy as np

from specjax.benchmark.tasks import CATEGORIES
from specjax.cli import model_from_source
from specjax.drafters.shipped import shipped_directory
from specjax.training.acceptance import greedy_continuations, heldout_prompts, teacher_forced
from specjax.training.corpus import stdlib_docstrings
from specjax.training.data import _target_forward, target_pass
from specjax.training.export import load_drafter
from specjax.training.objectives import feature_head_objective

BATCH, SEQ_LEN = 8, 200


def tokens_per_minute(target, tokens_BxT, layer_ids, bf16_gemm: bool) -> float:
  start = time.perf_counter()
  jax.block_until_ready(_target_forward(target, tokens_BxT, layer_ids, bf16_gemm))
  return tokens_BxT.size / (time.perf_counter() - start) * 60


def main(argv):
  pairs = int(argv[1]) if len(argv) > 1 else 5
  n_prompts = int(argv[2]) if len(argv) > 2 else 4
  target = model_from_source("smollm2-135m")
  head = load_drafter(shipped_directory("feature_head", target.config), target)
  objective = feature_head_objective(head)
  layer_ids = objective.layer_ids
  ids = target.tokenizer.encode(stdlib_docstrings(200_000))
  batches = [np.asarray(ids[i * BATCH * SEQ_LEN:(i + 1) * BATCH * SEQ_LEN], np.int32).reshape(BATCH, SEQ_LEN)
             for i in range(pairs)]
  for flag in (False, True):   # compile both first
    tokens_per_minute(target, batches[0], layer_ids, flag)
  rates = {False: [], True: []}
  for i, batch in enumerate(batches):
    for flag in ((False, True) if i % 2 == 0 else (True, False)):
      rates[flag].append(tokens_per_minute(target, batch, layer_ids, flag))
  ratios = np.divide(rates[True], rates[False])
  print(f"feature pass, batches of {BATCH} x {SEQ_LEN}, layers {layer_ids}: float32 "
        f"{np.median(rates[False]):,.0f} tokens/min, bfloat16 operands {np.median(rates[True]):,.0f} tokens/min; "
        f"ratio per pair {np.round(ratios, 2).tolist()}, median {np.median(ratios):.2f}x")
  for category in CATEGORIES:
    exact = greedy_continuations(target, heldout_prompts(target, [category], n_prompts), 64, layer_ids)
    hidden, layers = target_pass(target, exact.tokens, layer_ids, bf16_gemm=True)
    fast = dataclasses.replace(exact, hidden=hidden, layers=layers)
    scored = exact.mask.astype(bool)
    a, b = (np.asarray(c.layers, np.float32)[scored] for c in (exact, fast))
    error = np.median(np.abs(b - a)) / np.median(np.abs(a))
    m_exact, m_fast = (teacher_forced(objective, head.net, c) for c in (exact, fast))
    print(f"{category:13s} feature error (median |diff| / median |value|) {error:.4f}; shipped head top-1 step 1/2/3 "
          + " / ".join(f"{m_exact[f'top1_{s}']:.3f}" for s in (1, 2, 3)) + " (float32) vs "
          + " / ".join(f"{m_fast[f'top1_{s}']:.3f}" for s in (1, 2, 3)) + " (bfloat16 operands)")


if __name__ == "__main__":
  main(sys.argv)
