"""Milliseconds per token, autoregressive and speculative, from per-round phase times, with Leviathan et al.'s
expected tokens per round (specjax.benchmark.theory). The same model serves the TPU roofline times and the
phase-split times the CPU benchmark measures.

  autoregressive   ms/token = t_ar                      (one target position + sampling)
  speculative      ms/token = (K t_draft + t_verify(K)) / E(alpha, K),  E = (1 - alpha^(K+1)) / (1 - alpha)
"""

from specjax.benchmark import theory


def spec_speedup(alpha: float, k: int, ar_ms: float, draft_step_ms: float, verify_ms: float) -> float:
  """t_ar / speculative ms per token: Theorem 3.8 with the measured (or roofline) cost of verifying K+1."""
  if ar_ms <= 0:
    raise ValueError(f"autoregressive step time must be > 0, got {ar_ms}")
  return theory.corrected_speedup(alpha, k, draft_step_ms / ar_ms, verify_ms / ar_ms)


def spec_ms_per_token(alpha: float, k: int, ar_ms: float, draft_step_ms: float, verify_ms: float) -> float:
  return ar_ms / spec_speedup(alpha, k, ar_ms, draft_step_ms, verify_ms)


def implied_alpha(speedup: float, k: int, ar_ms: float, draft_step_ms: float, verify_ms: float,
                  tol: float = 1e-10) -> float | None:
  """The acceptance rate at which the model gives `speedup`; None when no alpha in [0, 1] does."""
  lo, hi = 0.0, 1.0
  f = lambda a: spec_speedup(a, k, ar_ms, draft_step_ms, verify_ms) - speedup  # increasing in alpha
  if f(lo) > 0 or f(hi) < 0:
    return None
  while hi - lo > tol:
    mid = 0.5 * (lo + hi)
    lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
  return 0.5 * (lo + hi)
