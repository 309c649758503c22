"""A training run's curves as one figure: the training and held-out KL, the draft's top-1 agreement with the target
(first draft step), both against the step, from its metrics.jsonl; tokens per round before and after in the title."""

import json
import os

import numpy as np


def read_metrics(path: str) -> tuple[list[dict], list[dict]]:
  """(training records, held-out records) of a metrics.jsonl, each in step order."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"no training metrics at {path!r}")
  with open(path, encoding="utf-8") as f:
    records = [json.loads(line) for line in f if line.strip()]
  training = sorted((r for r in records if "kl" in r), key=lambda r: r["step"])
  heldout = sorted((r for r in records if "heldout_kl" in r), key=lambda r: r["step"])
  if not training and not heldout:
    raise ValueError(f"{path!r} holds no training or held-out records")
  return training, heldout


def smoothed(values: list[float], window: int) -> np.ndarray:
  """The running mean over the last `window` values (fewer at the start)."""
  values = np.asarray(values, np.float64)
  sums = np.cumsum(np.concatenate([[0.0], values]))
  starts = np.maximum(np.arange(1, len(values) + 1) - window, 0)
  return (sums[1:] - sums[starts]) / (np.arange(1, len(values) + 1) - starts)


def write_curves(metrics_path: str, out_path: str, acceptance: tuple | None = None, window: int = 10) -> str:
  """Writes the figure (PNG) to out_path; `acceptance`: (tokens per round before, after, K) for the title."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  training, heldout = read_metrics(metrics_path)
  fig, (kl_ax, top1_ax) = plt.subplots(1, 2, figsize=(10, 3.6))
  for ax, key, label in ((kl_ax, "kl", "KL(target || draft)"), (top1_ax, "top1_1", "top-1 agreement, step 1")):
    if training:
      steps = [r["step"] for r in training]
      ax.plot(steps, smoothed([r[key] for r in training], window), label=f"training (mean of {window} logs)")
    if heldout:
      ax.plot([r["step"] for r in heldout], [r[f"heldout_{key}"] for r in heldout], marker="o", label="held out")
    ax.set_xlabel("step")
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
    ax.legend()
  if acceptance is not None:
    before, after, k = acceptance
    fig.suptitle(f"tokens per round (greedy, K={k}, held-out prompts): {before:.2f} -> {after:.2f}")
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
  fig.savefig(out_path, dpi=100)
  plt.close(fig)
  return out_path
