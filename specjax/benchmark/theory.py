"""Expected speedup of speculative decoding (Leviathan et al. 2023), beside what the benchmark measures.

With per-position acceptance probability alpha (i.i.d.), K drafts per round and cost ratio
c = (time of one draft step) / (time of one target step):
  expected tokens per round   E = (1 - alpha^(K+1)) / (1 - alpha)          (Thm 3.1 / Eq. 1)
  walltime improvement        E / (K c + 1)                               (Thm 3.8)
Theorem 3.8 assumes one verification call over K+1 positions costs the same as one target step. We measure
that ratio, r = (verify + accept time per round) / (autoregressive step time), and use
  corrected prediction        E / (K c + r).
"""

from specjax.trees import expected as _trees

# Token trees: the theory lives beside the trees (`specjax.trees.expected`); the benchmark reads it from here.
tree_expected_tokens, best_tree, measured_rates = _trees.tree_expected_tokens, _trees.best_tree, _trees.measured_rates


def expected_tokens_per_round(alpha: float, k: int) -> float:
  if not 0.0 <= alpha <= 1.0:
    raise ValueError(f"alpha must be in [0, 1], got {alpha}")
  if k < 0:
    raise ValueError(f"k must be >= 0, got {k}")
  if alpha == 1.0:
    return float(k + 1)
  return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def theorem_speedup(alpha: float, k: int, c: float) -> float:
  """Leviathan et al. (2023) Theorem 3.8: expected walltime improvement factor."""
  if c < 0:
    raise ValueError(f"cost ratio c must be >= 0, got {c}")
  return expected_tokens_per_round(alpha, k) / (k * c + 1.0)


def corrected_speedup(alpha: float, k: int, c: float, verify_ratio: float) -> float:
  """Theorem 3.8 with the measured cost of verifying K+1 positions (verify_ratio single target steps)."""
  if verify_ratio <= 0:
    raise ValueError(f"verify_ratio must be > 0, got {verify_ratio}")
  return expected_tokens_per_round(alpha, k) / (k * c + verify_ratio)


def cost_ratios(draft_ms: float, verify_ms: float, accept_ms: float, ar_verify_ms: float, ar_accept_ms: float,
                k: int) -> tuple[float, float]:
  """(c, r) from phase-split means: c = draft ms per draft step / AR step ms, r = (verify + accept) / AR step,
  where the AR step (one target position plus its commit) is the autoregressive round at the same batch size."""
  step = ar_verify_ms + ar_accept_ms
  if step <= 0:
    raise ValueError("autoregressive step time must be > 0")
  return (draft_ms / k) / step if k else 0.0, (verify_ms + accept_ms) / step


def explain_gap(measured: float, predicted: float, tokens_per_round: float | None, expected_tokens: float | None,
                fused_round_ratio: float | None, predicted_round_ratio: float | None, batch_size: int,
                tolerance: float = 0.15) -> str | None:
  """None when |measured / predicted - 1| <= tolerance; otherwise the larger cause of the gap, in words."""
  if measured is None or predicted is None or predicted <= 0:
    return None
  gap = measured / predicted - 1.0
  if abs(gap) <= tolerance:
    return None
  causes = []
  if tokens_per_round and expected_tokens:
    t_gap = tokens_per_round / expected_tokens - 1.0
    causes.append((abs(t_gap), f"tokens per round {tokens_per_round:.2f} vs {expected_tokens:.2f} expected from alpha "
                   f"({t_gap:+.0%}): acceptance is not i.i.d. across draft positions"))
  if fused_round_ratio and predicted_round_ratio:
    r_gap = fused_round_ratio / predicted_round_ratio - 1.0
    note = (f"a fused speculative round costs {fused_round_ratio:.2f} AR rounds vs {predicted_round_ratio:.2f} from "
            f"the phase-split times ({r_gap:+.0%}): prefill, host overhead and fusion are not in the phase model")
    if batch_size > 1:
      note += "; at batch > 1 rows that finish early still ride along until the slowest row ends"
    causes.append((abs(r_gap), note))
  reason = max(causes)[1] if causes else "no phase-split timing to attribute the gap"
  return f"measured {measured:.2f}x vs predicted {predicted:.2f}x ({gap:+.0%}); {reason}"


def rank_acceptance(alpha: float, sibling_rate: float, width: int) -> tuple[float, ...]:
  """Per-rank acceptance (Sequoia's positional acceptance): entry r is the probability that, its parent accepted,
  a node's rank-r child is the one accepted. Rank 0 is accepted at alpha (the chain's rate); each lower rank, once
  every higher-ranked sibling was rejected, at sibling_rate: p_r = (1 - alpha) beta (1 - beta)^(r - 1)."""
  if not 0.0 <= alpha <= 1.0 or not 0.0 <= sibling_rate <= 1.0:
    raise ValueError(f"alpha and sibling_rate must be in [0, 1], got {alpha}, {sibling_rate}")
  if width < 1:
    raise ValueError(f"width must be >= 1, got {width}")
  return (alpha,) + tuple((1.0 - alpha) * sibling_rate * (1.0 - sibling_rate) ** (r - 1) for r in range(1, width))
