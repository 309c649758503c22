"""The one place that turns logits into the distribution that is sampled from.

Target p and draft q both come from `distribution`, so the rejection sampler compares exactly the
distributions that are sampled. Order: temperature, then top-k, then top-p on the tempered distribution.
Temperature 0 is greedy: a one-hot distribution on the argmax (ties go to the lowest token id).
"""

import dataclasses
import math

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """temperature 0 means greedy; top_k 0 and top_p 1 mean off. Frozen and hashable: jit-static."""

  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0

  def __post_init__(self):
    if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)):
      raise TypeError(f"temperature must be a number, got {self.temperature!r}")
    if not math.isfinite(self.temperature) or self.temperature < 0:
      raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
    if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
      raise ValueError(f"top_k must be an int >= 0 (0 = off), got {self.top_k!r}")
    if isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
      raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p!r}")
    object.__setattr__(self, "temperature", float(self.temperature))
    object.__setattr__(self, "top_p", float(self.top_p))

  @property
  def greedy(self) -> bool:
    return self.temperature == 0.0


GREEDY = SamplingParams(temperature=0.0)


def distribution(logits_xV: jax.Array, sampling: SamplingParams) -> jax.Array:
  """Float32 probabilities over the last axis after temperature, top-k and top-p."""
  logits = logits_xV.astype(jnp.float32)
  vocab = logits.shape[-1]
  if sampling.greedy:
    return _greedy_draw(logits)[1]
  logits = logits / sampling.temperature
  if 0 < sampling.top_k < vocab:
    kth_largest = jnp.min(top_k(logits, sampling.top_k)[0], axis=-1, keepdims=True)
    logits = jnp.where(logits < kth_largest, -jnp.inf, logits)
  probs = jax.nn.softmax(logits, axis=-1)
  if sampling.top_p < 1.0:
    probs = _nucleus(probs, sampling.top_p)
  return probs


def top_k(x_xV: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
  """`jax.lax.top_k` in float32. XLA:CPU runs its TopK kernel only when the result is used as one leading slice: a
  bfloat16 input, or a consumer that slices out one rank (use `rank_of`), turns it into a sort of the whole row
  (34 ms for top-k sampling over 5 x 49,152 logits, 2.5 ms per branched context of a tree; section 55). The cast is
  exact, so the ranks are the same."""
  return jax.lax.top_k(x_xV.astype(jnp.float32), k)


def rank_of(ranked_xW: jax.Array, rank: int) -> jax.Array:
  """Column `rank` of `top_k`'s output as a masked sum over every rank, which keeps XLA:CPU's TopK kernel where a
  slice of that column would become a full sort (an optimization barrier would too, but aborts SPMD compilation)."""
  iota_xW = jax.lax.broadcasted_iota(jnp.int32, ranked_xW.shape, ranked_xW.ndim - 1)
  return jnp.sum(jnp.where(iota_xW == rank, ranked_xW, jnp.zeros_like(ranked_xW)), axis=-1)


def greedy_tokens(logits_xV: jax.Array) -> jax.Array:
  """The argmax over the last axis (ties to the lowest id) as a max, then the least index that holds it: two
  vectorized reductions, where XLA:CPU's argmax, one variadic reduction, took 2-4x as long over 49,152 logits."""
  vocab = logits_xV.shape[-1]
  max_x1 = jnp.max(logits_xV, axis=-1, keepdims=True)
  index_xV = jax.lax.broadcasted_iota(jnp.int32, logits_xV.shape, logits_xV.ndim - 1)
  first = jnp.min(jnp.where(logits_xV == max_x1, index_xV, vocab), axis=-1)
  return jnp.minimum(first, vocab - 1)  # NaN logits match nothing: stay in range


def draw_tokens(keys_B: jax.Array, logits_BxV: jax.Array, sampling: SamplingParams) -> tuple[jax.Array, jax.Array]:
  """(token_B, probs_BxV): one token per row drawn from `distribution`, the rule target and drafts share; greedy
  takes the argmax without a draw."""
  if sampling.greedy:
    return _greedy_draw(logits_BxV.astype(jnp.float32))
  probs_BxV = distribution(logits_BxV, sampling)
  return jax.vmap(sample)(keys_B, probs_BxV), probs_BxV


def _greedy_draw(logits_xV: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(argmax, its one-hot distribution): greedy's token and p, the argmax taken once over the logits."""
  token_x = greedy_tokens(logits_xV)
  return token_x, jax.nn.one_hot(token_x, logits_xV.shape[-1], dtype=jnp.float32)


def _nucleus(probs_xV: jax.Array, top_p: float) -> jax.Array:
  """Keeps the smallest set of most likely tokens whose mass reaches top_p (ties at the edge all kept): those at or
  above the least probability whose strictly likelier tokens hold less than top_p. That threshold is found by a
  binary search over float32 bit patterns (31 masked sums over V); XLA:CPU's sort of the vocabulary took 8 ms a
  row (section 55)."""
  probs_xV = probs_xV.astype(jnp.float32)

  def mass_above(bits_x1):
    threshold_x1 = jax.lax.bitcast_convert_type(bits_x1, jnp.float32)
    return jnp.sum(jnp.where(probs_xV > threshold_x1, probs_xV, 0.0), axis=-1, keepdims=True)

  def halve(_, bounds):  # mass_above(low) >= top_p > mass_above(high)
    low_x1, high_x1 = bounds
    mid_x1 = low_x1 + (high_x1 - low_x1) // 2
    below = mass_above(mid_x1) < top_p
    return jnp.where(below, low_x1, mid_x1), jnp.where(below, mid_x1, high_x1)

  high_x1 = jax.lax.bitcast_convert_type(jnp.max(probs_xV, axis=-1, keepdims=True), jnp.int32)
  _, high_x1 = jax.lax.fori_loop(0, 31, halve, (jnp.zeros_like(high_x1), high_x1))
  kept = jnp.where(probs_xV >= jax.lax.bitcast_convert_type(high_x1, jnp.float32), probs_xV, 0.0)
  return kept / kept.sum(axis=-1, keepdims=True)


def sample(key: jax.Array, probs_xV: jax.Array) -> jax.Array:
  """One token id per leading index, drawn from `probs_xV` (zero-probability tokens never drawn).

  Inverse transform: the first token whose cumulative mass exceeds one uniform draw. The Gumbel-max trick needs
  V random numbers per draw instead of one: on CPU, 3.7 ms of random bits per SmolLM2 token (49152 entries),
  paid by every target step and every draft."""
  cdf_xV = jnp.cumsum(probs_xV.astype(jnp.float32), axis=-1)
  u_x1 = jax.random.uniform(key, probs_xV.shape[:-1] + (1,), jnp.float32) * cdf_xV[..., -1:]
  index = jnp.sum(cdf_xV <= u_x1, axis=-1)
  # u can round up to the total mass; then the draw is the last token that has any
  vocab = probs_xV.shape[-1]
  last_with_mass = vocab - 1 - jnp.argmax(jnp.flip(probs_xV > 0, axis=-1), axis=-1)
  return jnp.minimum(index, last_with_mass).astype(jnp.int32)
