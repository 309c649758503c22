"""Per-round statistics of a generation: the one definition that `result.stats`, the benchmark's metrics and the
adaptive policy's acceptance estimate share.

Definitions: a *round* is one target verification call. In a round a row *accepts* n of the K drafts proposed
(0 <= n <= K) and then emits one more token from the target: the *correction* when a draft was rejected,
the *bonus* when all K passed (an autoregressive round, K = 0, emits the target's token and is neither).
Tokens per round = accepted + 1 (before cuts at EOS / max_new_tokens). The first token, sampled from the prefill,
belongs to no round.

The loop's record is `accepted_RxB` (accepted drafts per round and row, -1 where the row was inactive) and `k_R`
(the K proposed in each round). `active_rounds` flattens it to the active row-rounds `accepted_N` with the K of
each, `k_N`; every figure below is a pure function of those two, so records of several calls with different batch
sizes pool by concatenation. A figure that is undefined (no active rounds, no drafts proposed) is None.

A token tree of N nodes and depth D accepts a path of n <= D nodes: its per-position figures are per depth (K = D:
P(depth i accepted | depth i - 1 was)), its acceptance rate and nodes per accepted token count the N nodes
verified, and a round ends in a bonus when the path reached depth D (a shallower leaf's bonus counts as a
correction: the record holds only n).
"""

import dataclasses

import numpy as np


def _no_rounds() -> tuple[np.ndarray, np.ndarray]:
  return np.zeros((0,), np.int64), np.zeros((0,), np.int64)


def tested_drafts(n_accepted, k):
  """Drafts whose acceptance test ran: a round that accepts n < K drafts tested n + 1, one that accepts all K
  tested K, i.e. min(n + 1, K). Plain operators (valid for n <= K), so numpy and jax arrays (inside jit too) alike."""
  return n_accepted + 1 - (n_accepted >= k)


def active_rounds(accepted_RxB, k_R) -> tuple[np.ndarray, np.ndarray]:
  """(accepted_N, k_N): accepted drafts of every active row-round (round-major) and the K proposed in its round.
  k_R: the K of each round, or one K for every round."""
  accepted_RxB = np.asarray(accepted_RxB, np.int64)
  if not accepted_RxB.size:
    return _no_rounds()
  k_RxB = np.broadcast_to(np.asarray(k_R, np.int64).reshape(-1, 1), accepted_RxB.shape)
  active = accepted_RxB >= 0
  return accepted_RxB[active], k_RxB[active]


def pool(parts) -> tuple[np.ndarray, np.ndarray]:
  """Concatenates (accepted_N, k_N) pairs of several records."""
  parts = list(parts)
  if not parts:
    return _no_rounds()
  return (np.concatenate([a for a, _ in parts]).astype(np.int64),
          np.concatenate([k for _, k in parts]).astype(np.int64))


def _ratio(num, den) -> float | None:
  return float(num / den) if den else None


def active_row_rounds(accepted_N) -> int:
  return int(np.size(accepted_N))


def accepted_drafts(accepted_N) -> int:
  return int(np.sum(accepted_N))


def proposed_drafts(k_N) -> int:
  return int(np.sum(k_N))


def total_tested_drafts(accepted_N, k_N) -> int:
  return int(np.sum(tested_drafts(np.asarray(accepted_N), np.asarray(k_N))))


def mean_accepted_per_round(accepted_N) -> float | None:
  return _ratio(accepted_drafts(accepted_N), active_row_rounds(accepted_N))


def tokens_per_round(accepted_N) -> float | None:
  """Accepted drafts + 1 (correction, bonus or autoregressive token) per active row-round."""
  return _ratio(accepted_drafts(accepted_N) + active_row_rounds(accepted_N), active_row_rounds(accepted_N))


def acceptance_rate(accepted_N, k_N) -> float | None:
  """Accepted drafts / proposed drafts."""
  return _ratio(accepted_drafts(accepted_N), proposed_drafts(k_N))


def alpha(accepted_N, k_N) -> float | None:
  """Per-position acceptance probability under Leviathan et al.'s i.i.d. model, its maximum-likelihood estimate:
  accepted drafts / tested drafts. Equals the per-position rates pooled over positions."""
  return _ratio(accepted_drafts(accepted_N), total_tested_drafts(accepted_N, k_N))


def acceptance_per_position(accepted_N, k_N, k: int) -> list[float | None]:
  """P(draft i accepted | drafts before it accepted), i = 1..k: accepted at position i / tested at position i."""
  accepted_N, k_N = np.asarray(accepted_N), np.asarray(k_N)
  return [_ratio(int((accepted_N >= i + 1).sum()), int(((accepted_N >= i) & (k_N > i)).sum())) for i in range(k)]


def bonus_rate(accepted_N, k_N) -> float | None:
  """Share of active row-rounds in which all K > 0 drafts passed (a bonus token)."""
  accepted_N, k_N = np.asarray(accepted_N), np.asarray(k_N)
  return _ratio(int(((accepted_N == k_N) & (k_N > 0)).sum()), active_row_rounds(accepted_N))


def correction_rate(accepted_N, k_N) -> float | None:
  """Share of active row-rounds in which a draft was rejected (a correction token)."""
  return _ratio(int((np.asarray(accepted_N) < np.asarray(k_N)).sum()), active_row_rounds(accepted_N))


def verified_per_accepted(accepted_N, verified_N) -> float | None:
  """Drafts verified (K, or a tree's N nodes) per accepted draft: the verification work one accepted token costs."""
  return _ratio(proposed_drafts(verified_N), accepted_drafts(accepted_N))


def acceptance_by_rank(rank_RxBxD1, children_RxBxD1, width: int) -> list[float | None]:
  """Per-rank acceptance (Sequoia's positional acceptance) from a token tree's rank log (`trees.ranks`): entry r is
  the share of visited contexts with a rank-r child whose accepted child was that one; what
  `benchmark.theory.tree_expected_tokens` takes. None where no context had a child of that rank."""
  rank = np.asarray(rank_RxBxD1, np.int64).reshape(-1)
  children = np.asarray(children_RxBxD1, np.int64).reshape(-1)
  return [_ratio(np.sum(rank == r), np.sum(children > r)) for r in range(width)]


def acceptance_by_depth_and_rank(rank_RxBxD1, children_RxBxD1, width: int) -> list[list[float | None]]:
  """Per-rank acceptance at each depth: row d - 1 is `acceptance_by_rank` over the contexts whose children sit at
  depth d (the root's for d = 1); for drafters whose choices weaken with depth (Medusa's head d), which the pooled
  figure averages away."""
  rank = np.asarray(rank_RxBxD1, np.int64)
  children = np.asarray(children_RxBxD1, np.int64)
  return [acceptance_by_rank(rank[..., d], children[..., d], width) for d in range(rank.shape[-1] - 1)]


def mean_k(k_N) -> float | None:
  """Drafts proposed per active row-round (K itself unless the adaptive policy varied it)."""
  return _ratio(proposed_drafts(k_N), np.size(k_N))


@dataclasses.dataclass
class GenerationStats:
  """The figures above for one generate() call; 0.0 where a figure is undefined (no rounds, no drafts)."""

  rounds: int                               # verification rounds the loop ran
  k: int                                    # drafts proposed per round (the largest K when the policy varied it)
  accepted_per_round: list[list[int]]       # per row: accepted drafts in each round the row was active
  new_tokens: list[int]                     # per row
  mean_accepted_per_round: float            # accepted drafts per active row-round
  mean_tokens_per_round: float              # accepted + 1 (correction / bonus) per active row-round
  acceptance_rate: float                    # accepted drafts / proposed drafts
  acceptance_rate_per_position: list[float]  # P(draft i accepted | drafts before it accepted), i = 1..K
  bonus_rate: float                         # share of active row-rounds ending in a bonus token (all K passed)
  correction_rate: float                    # share ending in a correction token (a draft was rejected)
  alpha: float = 0.0                        # accepted / tested drafts (Leviathan et al.'s per-position MLE)
  mean_k: float = 0.0                       # drafts proposed per active row-round
  wall_time_s: float = 0.0                  # generate() call, including any compilation
  first_token_s: float = 0.0                # time to first token: the prefill program (and its compilation)
  tree_nodes: int = 0                       # a token tree's N nodes verified per round (k is then its depth); 0: chain
  verified_per_accepted: float = 0.0        # drafts (or tree nodes) verified per accepted draft
  acceptance_by_rank: list[float] = dataclasses.field(default_factory=list)  # trees: P(rank-r child accepted)
  # trees: the same per depth (row d - 1: children at depth d; None where no context had a child of that rank)
  acceptance_by_depth_and_rank: list[list[float | None]] = dataclasses.field(default_factory=list)

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)


def _or_zero(value: float | None) -> float:
  return 0.0 if value is None else value


def summarize(accepted_RxB: np.ndarray, new_tokens_B: np.ndarray, rounds: int, k: int,
              wall_time_s: float = 0.0, first_token_s: float = 0.0, k_R=None, tree=None,
              tree_log=None) -> GenerationStats:
  """Stats from the loop's [rounds, batch] record of accepted counts (-1 marks an inactive row). k_R: drafts
  proposed in each round when K varied (adaptive policy); k is then the largest K. tree: the rounds' token tree
  (a StaticTree or DynamicTree): k is then its depth and k_R is not read; tree_log: its (rank, children) record."""
  record = np.asarray(accepted_RxB, np.int64)[:rounds]
  if tree is not None:
    k, k_R = tree.max_depth, None
  accepted_N, k_N = active_rounds(record, k if k_R is None else np.asarray(k_R)[:rounds])
  verified_N = k_N if tree is None else np.full_like(k_N, tree.n_nodes)
  return GenerationStats(
      rounds=int(rounds),
      k=int(k),
      accepted_per_round=[record[:, b][record[:, b] >= 0].tolist() for b in range(record.shape[1])],
      new_tokens=[int(n) for n in new_tokens_B],
      mean_accepted_per_round=_or_zero(mean_accepted_per_round(accepted_N)),
      mean_tokens_per_round=_or_zero(tokens_per_round(accepted_N)),
      acceptance_rate=_or_zero(acceptance_rate(accepted_N, verified_N)),
      acceptance_rate_per_position=[_or_zero(p) for p in acceptance_per_position(accepted_N, k_N, int(k))],
      bonus_rate=_or_zero(bonus_rate(accepted_N, k_N)),
      correction_rate=_or_zero(correction_rate(accepted_N, k_N)),
      alpha=_or_zero(alpha(accepted_N, k_N)),
      mean_k=_or_zero(mean_k(k_N)),
      wall_time_s=wall_time_s,
      first_token_s=first_token_s,
      tree_nodes=0 if tree is None else tree.n_nodes,
      verified_per_accepted=_or_zero(verified_per_accepted(accepted_N, verified_N)),
      acceptance_by_rank=([_or_zero(p) for p in acceptance_by_rank(*tree_log, tree.width)]
                          if tree is not None and tree_log is not None else []),
      acceptance_by_depth_and_rank=(acceptance_by_depth_and_rank(*tree_log, tree.width)
                                    if tree is not None and tree_log is not None else []),
  )
