"""Adaptive speculation: K picked every round from the measured acceptance and the measured cost of a round.

Extra draft work makes serving slower when acceptance is low or when verifying K+1 positions costs much more
than one step (large batches). `SpeculationPolicy` puts one branch per candidate K (and K = 0, plain
autoregressive steps) in the compiled loop. Each round it estimates the per-position acceptance alpha (an
exponential average of accepted / tested drafts over active rows) and takes the branch with the most expected
tokens per unit of time, E(alpha, K) / cost(K), where cost(K) is the measured time of a round at that K over
the time of an autoregressive step (`specjax.calibration`). It starts small: the first round drafts with the
smallest K whatever the prior says (a probe, within the probe budget below), and that round's acceptance replaces
the prior; a drafter that matches almost always (the target's own quantized weights) is then at its best K from
the second round, where a prior of 0.5 against a K=1 round of 1.6 steps would have kept it autoregressive until
its first probe. While speculation does not pay, it probes with the smallest K so that a drafter that starts to
match again (e.g. prompt lookup reaching quoted text) is noticed. Probes are spaced so that failed ones cost at
most `probe_budget` of the autoregressive time: a probe loses cost(K_min) - 1 steps, so the first comes after
(cost(K_min) - 1) / probe_budget autoregressive rounds (at least `probe_interval`), the spacing doubles after each
failed probe, and no probe runs once fewer than (cost(K_min) - 1) / probe_budget tokens are left to generate, or
where no K could pay even with every draft accepted ((K + 1) / cost(K) <= 1 for all K: a large batch).
"""

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp

from specjax import stats


@dataclasses.dataclass(frozen=True)
class SpeculationPolicy:
  """Static (jit) settings; the costs are runtime inputs."""

  ks: tuple[int, ...] = (1, 2, 4)   # candidate drafts per round, smallest first
  smoothing: float = 0.3            # weight of the newest round in the acceptance estimate
  prior_alpha: float = 0.5          # acceptance estimate before any round was verified
  probe_interval: int = 4           # fewest autoregressive rounds before a probe; doubles after a failed probe
  max_probe_interval: int = 64
  probe_budget: float = 0.03        # fraction of autoregressive time that failed probes may cost

  def __post_init__(self):
    ks = tuple(self.ks)
    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
      raise ValueError(f"SpeculationPolicy.ks must be non-empty ints >= 1, got {self.ks!r}")
    if list(ks) != sorted(set(ks)):
      raise ValueError(f"SpeculationPolicy.ks must be increasing without repeats, got {self.ks!r}")
    object.__setattr__(self, "ks", ks)
    if not 0.0 < self.smoothing <= 1.0:
      raise ValueError(f"SpeculationPolicy.smoothing must be in (0, 1], got {self.smoothing}")
    if not 0.0 <= self.prior_alpha < 1.0:
      raise ValueError(f"SpeculationPolicy.prior_alpha must be in [0, 1), got {self.prior_alpha}")
    if not 0.0 < self.probe_budget <= 1.0:
      raise ValueError(f"SpeculationPolicy.probe_budget must be in (0, 1], got {self.probe_budget}")
    if not 1 <= self.probe_interval <= self.max_probe_interval:
      raise ValueError("SpeculationPolicy needs 1 <= probe_interval <= max_probe_interval, got "
                       f"{self.probe_interval} and {self.max_probe_interval}")

  @property
  def max_k(self) -> int:
    return self.ks[-1]

  @property
  def branch_ks(self) -> tuple[int, ...]:
    """K of each branch of the compiled loop: 0 (autoregressive) first."""
    return (0,) + self.ks


@flax.struct.dataclass
class PolicyState:
  """What the policy learns during one generation."""

  alpha: jax.Array            # acceptance estimate (scalar)
  measured: jax.Array         # whether a round has tested drafts yet (before: alpha is the prior)
  ar_streak: jax.Array        # autoregressive rounds since the last speculative one
  interval: jax.Array         # autoregressive rounds before the next probe
  rounds: jax.Array           # rounds run under this policy (its first one starts small); the serving engine keeps
                              # one PolicyState across its steps, each of which restarts the state's round count


@flax.struct.dataclass
class PolicyInputs:
  """What the policy is given from outside the generation: the measured cost of a round at each branch, relative to
  an autoregressive step (`specjax.calibration`), and a branch to force (>= 0; calibration times each branch this
  way) or -1 to let the policy decide."""

  round_cost_N: jax.Array
  forced_branch: jax.Array

  @classmethod
  def measured(cls, round_cost_N, forced_branch: int = -1) -> "PolicyInputs":
    return cls(round_cost_N=jnp.asarray(round_cost_N, jnp.float32), forced_branch=jnp.int32(forced_branch))


def init_policy_state(policy: SpeculationPolicy, round_cost_N=None) -> PolicyState:
  """The state before the first round; with round_cost_N, the first probe waits until its cost fits the budget."""
  return PolicyState(alpha=jnp.float32(policy.prior_alpha), measured=jnp.bool_(False), ar_streak=jnp.int32(0),
                     interval=first_probe_interval(policy, round_cost_N), rounds=jnp.int32(0))


def first_probe_interval(policy: SpeculationPolicy, round_cost_N=None) -> jax.Array:
  """Autoregressive rounds before a probe: failed probes (cost(K_min) - 1 steps each) stay within probe_budget."""
  if round_cost_N is None:
    return jnp.int32(policy.probe_interval)
  rounds = jnp.ceil(jnp.maximum(round_cost_N[1] - 1.0, 0.0) / policy.probe_budget)
  return jnp.clip(rounds, policy.probe_interval, policy.max_probe_interval).astype(jnp.int32)


def expected_tokens(alpha, k):
  """(1 - alpha^(K+1)) / (1 - alpha), as arrays (Leviathan et al. 2023, Eq. 1)."""
  alpha = jnp.clip(alpha, 0.0, 0.999)
  return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def choose_branch(policy: SpeculationPolicy, pstate: PolicyState, inputs: PolicyInputs, round_index,
                  tokens_left=None) -> jax.Array:
  """Index into `policy.branch_ks` for this round; round_index: the rounds run under the policy so far (the first
  one starts small). tokens_left: the most new tokens an active row may still
  produce; a probe is skipped when its cost (cost(K_min) - 1 steps) exceeds probe_budget of that rest too, since a
  late probe that finds matches has too few tokens left to pay itself back. No probe runs where no K could pay
  even if every draft were accepted."""
  round_cost_N = inputs.round_cost_N
  ks_N = jnp.asarray(policy.branch_ks, jnp.float32)
  value_N = expected_tokens(pstate.alpha, ks_N) / round_cost_N
  best = jnp.argmax(value_N).astype(jnp.int32)
  could_pay = jnp.max((ks_N[1:] + 1.0) / round_cost_N[1:]) > 1.0   # at full acceptance
  probe = (best == 0) & could_pay & ((pstate.ar_streak >= pstate.interval) | (round_index == 0))
  if tokens_left is not None:
    probe = probe & (tokens_left * policy.probe_budget >= round_cost_N[1] - 1.0)
  start_small = (round_index == 0) & (best > 0)
  branch = jnp.where(start_small | probe, 1, best)
  return jnp.where(inputs.forced_branch >= 0, inputs.forced_branch, branch).astype(jnp.int32)


def update_policy_state(policy: SpeculationPolicy, pstate: PolicyState, branch, k_used, n_accepted_B,
                        active_B, round_cost_N=None) -> PolicyState:
  """Folds one round's acceptance into the estimate; doubles the probe interval after a probe that did not pay."""
  tested_B = stats.tested_drafts(n_accepted_B, k_used)
  tested = jnp.sum(jnp.where(active_B, tested_B, 0))
  accepted = jnp.sum(jnp.where(active_B, n_accepted_B, 0))
  observed = accepted / jnp.maximum(tested, 1)
  speculative = (k_used > 0) & (tested > 0)
  smoothed = jnp.where(pstate.measured, (1 - policy.smoothing) * pstate.alpha + policy.smoothing * observed, observed)
  alpha = jnp.where(speculative, smoothed, pstate.alpha)
  was_probe = speculative & (pstate.ar_streak >= pstate.interval)
  interval = jnp.where(was_probe & (observed < 0.5),
                       jnp.minimum(2 * pstate.interval, policy.max_probe_interval), pstate.interval)
  interval = jnp.where(speculative & (observed >= 0.5), first_probe_interval(policy, round_cost_N), interval)
  ar_streak = jnp.where(branch == 0, pstate.ar_streak + 1, 0)
  return pstate.replace(alpha=alpha.astype(jnp.float32), measured=pstate.measured | speculative,
                        ar_streak=ar_streak.astype(jnp.int32), interval=interval.astype(jnp.int32),
                        rounds=pstate.rounds + 1)
