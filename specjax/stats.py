"""Per-round statistics of a generation, computed on the host from the compiled loop's records.

Definitions: a *round* is one target verification call. In a round a row *accepts* n of its K drafts
(0 <= n <= K) and then emits one more token from the target: the *correction* when a draft was rejected,
the *bonus* when all K passed. Tokens per round = accepted + 1 (before cuts at EOS / max_new_tokens).
The first token, sampled from the prefill, belongs to no round.
"""

import dataclasses

import numpy as np


@dataclasses.dataclass
class GenerationStats:
  rounds: int                               # verification rounds the loop ran
  k: int                                    # drafts proposed per round
  accepted_per_round: list[list[int]]       # per row: accepted drafts in each round the row was active
  new_tokens: list[int]                     # per row
  mean_accepted_per_round: float            # accepted drafts per active row-round
  mean_tokens_per_round: float              # accepted + 1 (correction / bonus) per active row-round
  acceptance_rate: float                    # accepted drafts / proposed drafts
  acceptance_rate_per_position: list[float]  # P(draft i accepted | drafts before it accepted), i = 1..K
  bonus_rate: float                         # share of active row-rounds ending in a bonus token (all K passed)
  correction_rate: float                    # share ending in a correction token (a draft was rejected)
  wall_time_s: float = 0.0                  # generate() call, including any compilation
  first_token_s: float = 0.0                # time to first token: the prefill program (and its compilation)

  def as_dict(self) -> dict:
    return dataclasses.asdict(self)


def summarize(accepted_RxB: np.ndarray, new_tokens_B: np.ndarray, rounds: int, k: int,
              wall_time_s: float = 0.0, first_token_s: float = 0.0, k_R=None) -> GenerationStats:
  """Stats from the loop's [rounds, batch] record of accepted counts (-1 marks an inactive row). k_R: drafts
  proposed in each round when K varied (adaptive policy); k is then the largest K."""
  record = np.asarray(accepted_RxB)[:rounds]
  active = record >= 0
  accepted = record[active]
  k_per = (np.broadcast_to(np.asarray(k_R)[:rounds, None], record.shape)[active] if k_R is not None
           else np.full(accepted.shape, k))
  per_row = [record[:, b][active[:, b]].tolist() for b in range(record.shape[1])]
  n_active = max(int(active.sum()), 1)
  reached = [((accepted >= i) & (k_per > i)).sum() for i in range(k)]
  per_position = [float((accepted >= i + 1).sum() / reached[i]) if reached[i] else 0.0 for i in range(k)]
  proposed = int(k_per.sum())
  return GenerationStats(
      rounds=int(rounds),
      k=int(k),
      accepted_per_round=per_row,
      new_tokens=[int(n) for n in new_tokens_B],
      mean_accepted_per_round=float(accepted.sum() / n_active),
      mean_tokens_per_round=float((accepted + 1).sum() / n_active),
      acceptance_rate=float(accepted.sum() / proposed) if proposed else 0.0,
      acceptance_rate_per_position=per_position,
      bonus_rate=float(((accepted == k_per) & (k_per > 0)).sum() / n_active) if k else 0.0,
      correction_rate=float((accepted < k_per).sum() / n_active) if k else 0.0,
      wall_time_s=wall_time_s,
      first_token_s=first_token_s,
  )
