"""When requests are sent, as `vllm bench serve` does: at a finite rate, gaps between arrivals are Gamma(shape =
burstiness, scale = 1 / (rate * burstiness)), mean 1 / rate whatever the burstiness; burstiness 1 is a Poisson process
(exponential gaps), below 1 burstier, above 1 more regular (infinite: a constant 1 / rate). An infinite rate sends
everything at once (no gaps), left to `--max-concurrency` to pace. Unlike vLLM the gaps are not rescaled to sum to
n / rate: the process stays the stated one."""

import math

import numpy as np


def arrival_gaps(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
  """n seconds between successive arrivals (the first: from the start); zeros for an infinite rate."""
  if not rate > 0:
    raise ValueError(f"request rate must be > 0 (inf: all at once), got {rate}")
  if not burstiness > 0:
    raise ValueError(f"burstiness must be > 0, got {burstiness}")
  if math.isinf(rate):
    return np.zeros(n)
  if math.isinf(burstiness):
    return np.full(n, 1.0 / rate)
  return np.random.default_rng(seed).gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)


def arrival_offsets(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
  """Seconds from the start at which each of n requests arrives: the first at 0, then the cumulative gaps."""
  if n == 0:
    return np.zeros(0)
  return np.concatenate([[0.0], np.cumsum(arrival_gaps(n - 1, rate, burstiness, seed))])
