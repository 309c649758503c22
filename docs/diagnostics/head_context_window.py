"""Does a trained feature head draft worse on long prompts because its attention reaches past what it was trained
on? Teacher-forced top-1 agreement with the target on the target's own greedy answers to benchmark prompts, the
head attending to the whole context or only to the last W positions (features and tokens cut to a window that
ends at the answer's end; RoPE is relative, so the cut changes only how far back the head can look).

  python docs/diagnostics/head_context_window.py [drafter_dir|shipped] [category] [n_prompts] [W ...]
"""

import dataclasses
import sys

import numpy as np

from specjax.cli import model_from_source
from specjax.drafters.shipped import shipped_directory
from specjax.training.acceptance import greedy_continuations, heldout_prompts, teacher_forced
from specjax.training.data import Corpus
from specjax.training.export import load_drafter
from specjax.training.objectives import feature_head_objective


def sequence_lengths(corpus: Corpus) -> np.ndarray:
  """Each row's length: its last scored position predicts the row's last token."""
  return np.array([np.flatnonzero(m)[-1] + 2 for m in corpus.mask])


def window(corpus: Corpus, width: int) -> Corpus:
  """Each row cut to its last `width` real positions, left-aligned (the scored answer must fit inside)."""
  rows = []
  for row, length in enumerate(sequence_lengths(corpus)):
    start = max(0, int(length) - width)
    scored = np.flatnonzero(corpus.mask[row])
    if scored.size and scored[0] < start:
      raise ValueError(f"row {row}: the answer starts {int(length) - scored[0]} positions from the end, > {width}")
    rows.append(slice(start, start + width))
  cut = lambda array: np.stack([np.asarray(array[r, s]) for r, s in enumerate(rows)])
  return dataclasses.replace(corpus, tokens=cut(corpus.tokens), mask=cut(corpus.mask), hidden=cut(corpus.hidden),
                             layers=cut(corpus.layers))


def main(argv):
  source = argv[1] if len(argv) > 1 else "shipped"
  category = argv[2] if len(argv) > 2 else "long_context"
  n_prompts = int(argv[3]) if len(argv) > 3 else 4
  widths = [int(w) for w in argv[4:]] or [96, 176, 352]
  target = model_from_source("smollm2-135m")
  head = load_drafter(shipped_directory("feature_head", target.config) if source == "shipped" else source, target)
  objective = feature_head_objective(head)
  prompts = heldout_prompts(target, [category], n_prompts)
  full = greedy_continuations(target, prompts, 64, objective.layer_ids)
  lengths = sequence_lengths(full)
  print(f"{category}: {n_prompts} prompts, sequence lengths {lengths.tolist()}")
  rows = [("whole context", full)] + [(f"last {w}", window(full, w)) for w in widths if w < lengths.max()]
  for name, corpus in rows:
    m = teacher_forced(objective, head.net, corpus)
    print(f"{name:14s} top1 step 1/2/3 {m['top1_1']:.3f} / {m['top1_2']:.3f} / {m['top1_3']:.3f}   "
          f"KL step 1 {m['kl_1']:.3f}")


if __name__ == "__main__":
  main(sys.argv)
