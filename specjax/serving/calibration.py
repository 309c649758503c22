"""The adaptive policy's round costs at each row bucket of the serving engine: what makes it load-aware. A round at
K drafts costs more relative to an autoregressive step as the batch fills (verification stops riding on the weight
reads), so the same acceptance can pay at 1 row and not at 16 (SmartSpec, TurboSpec). Each bucket's costs are timed
on the engine's own step programs, one per K (what the steps then run), over rows of a served-size context, then
refined by the served steps' own timings (`ServedCosts`): served contexts, admissions and drafter catch-ups make a
round cost what warmup rows of one length cannot show."""

import collections
import time

import jax
import numpy as np

from specjax.engine.programs import params_for
from specjax.serving import programs
from specjax.spec import DecodeSpec

REPEATS = 3


class BucketCosts:
  """Round costs per (spec, row bucket), measured once; `known` ({bucket: costs per branch}) is taken as measured
  for every spec, and so is the first spec's measurement for the others with its K branches (sampling settings):
  a round runs the same passes whatever the sampling, and the served steps refine each spec's costs. Measuring a
  new setting again would stall every request for its compilations and timings (minutes at 16 slots here)."""

  def __init__(self, known: dict | None = None):
    self._known = {int(b): np.asarray(c, np.float32) for b, c in (known or {}).items()}
    self._costs: dict[tuple, np.ndarray] = {}

  def get(self, spec: DecodeSpec, bucket: int, measure) -> np.ndarray:
    key = (spec, bucket)
    if key not in self._costs:
      shared = next((c for (other, b), c in self._costs.items() if b == bucket and other.k == spec.k), None)
      costs = self._known.get(bucket, shared)
      costs = np.asarray(measure(), np.float32) if costs is None else costs
      if costs.shape != (len(spec.k.branch_ks),) or not np.all(costs > 0):
        raise ValueError(f"round costs at {bucket} rows must be {len(spec.k.branch_ks)} positive numbers (one per "
                         f"K in {spec.k.branch_ks}), got {costs.tolist()}")
      self._costs[key] = costs
    return self._costs[key]

  def table(self) -> dict[int, list[float]]:
    """{bucket: costs per branch} of what was measured (the last spec's, if several)."""
    return {bucket: [round(float(c), 3) for c in costs] for (_, bucket), costs in self._costs.items()}


class ServedCosts:
  """Milliseconds per round as served, per (row bucket, K): the median of each key's last `window` steps (a step's
  wall time over its rounds, the drafter's catch-up before it included). `relative` turns them into the policy's
  costs against the autoregressive step at the same bucket, once that was served there; `stale` says when it
  should be again (every `refresh_steps` steps at a bucket, so the ratio follows the contexts as they grow)."""

  def __init__(self, window: int = 8, refresh_steps: int = 16):
    if window < 1 or refresh_steps < 1:
      raise ValueError(f"ServedCosts needs window >= 1 and refresh_steps >= 1, got {window} and {refresh_steps}")
    self.window, self.refresh_steps = window, refresh_steps
    self._ms: dict[tuple[int, int], collections.deque] = {}
    self._since_ar: dict[int, int] = {}   # steps at each bucket since its last autoregressive one

  def clear(self) -> None:
    self._ms.clear()
    self._since_ar.clear()

  def observe(self, bucket: int, k: int, seconds: float, rounds: int) -> None:
    if rounds < 1:
      return
    self._ms.setdefault((bucket, k), collections.deque(maxlen=self.window)).append(1e3 * seconds / rounds)
    self._since_ar[bucket] = 0 if k == 0 else self._since_ar.get(bucket, self.refresh_steps) + 1

  def ms(self, bucket: int, k: int) -> float | None:
    times = self._ms.get((bucket, k))
    return float(np.median(times)) if times else None

  def stale(self, bucket: int) -> bool:
    """Whether the autoregressive cost at this bucket is unmeasured or `refresh_steps` steps old."""
    return self._since_ar.get(bucket, self.refresh_steps) >= self.refresh_steps

  def unserved(self, bucket: int, branch_ks) -> tuple[int, ...]:
    """The drafting K of branch_ks not yet served at this bucket."""
    return tuple(k for k in branch_ks if k and not self._ms.get((bucket, k)))   # per step: no medians

  def relative(self, bucket: int, branch_ks, prior_N) -> np.ndarray:
    """Each branch's cost over the autoregressive step's, as served: a served K's own ratio (at least 1); an unserved
    K's prior, scaled by how far the served K's ratios are from theirs (geometric mean). `prior_N` until the
    autoregressive step was served at this bucket."""
    prior_N = np.asarray(prior_N, np.float32)
    ar = self.ms(bucket, 0)
    if ar is None:
      return prior_N
    served = {i: max(ms / ar, 1.0) for i, k in enumerate(branch_ks) if i and (ms := self.ms(bucket, k)) is not None}
    scale = np.exp(np.mean([np.log(r / prior_N[i]) for i, r in served.items()])) if served else 1.0
    costs = [1.0] + [served.get(i, max(float(prior_N[i] * scale), 1.0)) for i in range(1, len(branch_ks))]
    return np.asarray(costs, np.float32)

  def table(self) -> dict[int, dict[int, float]]:
    """{bucket: {K: ms per round}} of what was served."""
    table: dict[int, dict[int, float]] = {}
    for bucket, k in sorted(self._ms):
      table.setdefault(bucket, {})[k] = round(self.ms(bucket, k), 2)
    return table


def measure(slots, spec: DecodeSpec, bucket: int, repeats: int = REPEATS) -> np.ndarray:
  """Each K's round time over the autoregressive one (K = 0 -> 1.0) at `bucket` active rows."""
  ms = step_ms(slots, spec, bucket, repeats)
  return ms / ms[0]


def step_ms(slots, spec: DecodeSpec, bucket: int, repeats: int = REPEATS) -> np.ndarray:
  """Milliseconds per round at each K of the policy, at `bucket` active rows of `slots.calibration_context` tokens
  (attention and the drafter's work grow with the context: blank rows would make verification look cheap): the
  fastest of `repeats` steps of `slots.rounds` rounds of that K's step program, every row active."""
  branch_ks = spec.k.branch_ks
  params = params_for(slots.target, spec)
  active_S = np.ones((bucket,), bool)
  budget_S = np.full((bucket,), slots.rounds * (max(branch_ks) + 1) + 1, np.int32)

  def step_seconds(k: int) -> float:
    state = slots.filled_state(bucket, spec, slots.calibration_context)
    state = jax.block_until_ready(state.replace(done_B=np.zeros((bucket,), bool), n_new_B=np.zeros((bucket,),
                                                                                                   np.int32)))
    start = time.perf_counter()   # after the rows exist: their allocation is no part of a step
    out = programs.step_program(params, slots.drafter_params, state, active_S, budget_S, spec=spec,
                                rounds=slots.rounds, isolate=False, axes=slots.axes, k=k)
    rounds = int(jax.device_get(out.round))
    seconds = time.perf_counter() - start
    if rounds < 1:
      raise RuntimeError(f"calibration ran no round at K={k}")
    return seconds / rounds   # the copies of one row stop together if a stop token ends them early

  times = []
  for k in branch_ks:
    step_seconds(k)   # compiles
    times.append(min(step_seconds(k) for _ in range(repeats)))
  return 1e3 * np.asarray(times)
