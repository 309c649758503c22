"""`distribution` (the one logits -> probabilities rule) against a plain numpy reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.sampling import SamplingParams, distribution, draw_tokens, greedy_tokens, sample


def reference(logits, temperature, top_k, top_p):
  """Temperature, then top-k, then top-p (smallest prefix of the sorted distribution reaching top_p)."""
  if temperature == 0:
    out = np.zeros_like(logits)
    out[np.argmax(logits)] = 1
    return out
  z = logits / temperature
  if top_k:
    z = np.where(z < np.sort(z)[-top_k], -np.inf, z)
  p = np.exp(z - z.max())
  p /= p.sum()
  if top_p < 1:
    order = np.argsort(-p, kind="stable")
    cum = np.cumsum(p[order])
    n_keep = int(np.searchsorted(cum, top_p, side="left")) + 1
    keep = np.zeros_like(p, bool)
    keep[order[:n_keep]] = True
    p = np.where(keep, p, 0)
    p /= p.sum()
  return p


@pytest.mark.parametrize("temperature", [0.0, 0.3, 1.0, 2.0])
@pytest.mark.parametrize("top_k", [0, 1, 5])
@pytest.mark.parametrize("top_p", [1.0, 0.9, 0.3])
def test_distribution_matches_reference(temperature, top_k, top_p):
  logits = np.random.default_rng(0).normal(size=(4, 50)).astype(np.float32) * 3
  ours = np.asarray(distribution(jnp.asarray(logits), SamplingParams(temperature, top_k, top_p)))
  for row in range(4):
    np.testing.assert_allclose(ours[row], reference(logits[row].astype(np.float64), temperature, top_k, top_p),
                               atol=1e-6)


@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.99])
def test_nucleus_keeps_every_tie_at_the_edge_over_a_full_vocabulary(top_p):
  """The threshold search gives what sorting gives: the least kept probability of the sorted prefix whose mass
  before each token is below top_p, every token tied with it kept too; logits rounded to a coarse grid tie often."""
  logits = np.round(np.random.default_rng(1).normal(size=(3, 49152)) * 2) / 2
  ours = np.asarray(distribution(jnp.asarray(logits, jnp.float32), SamplingParams(1.0, 0, top_p)))
  for row in range(3):
    p = np.asarray(jax.nn.softmax(jnp.asarray(logits[row], jnp.float32)), np.float64)
    ordered = -np.sort(-p)
    n_keep = max(int(np.sum(np.cumsum(ordered) - ordered < top_p)), 1)
    kept = np.where(p >= ordered[n_keep - 1], p, 0.0)
    assert np.array_equal(ours[row] > 0, kept > 0) and (kept > 0).sum() > n_keep - 1
    np.testing.assert_allclose(ours[row], kept / kept.sum(), rtol=1e-5, atol=1e-9)


def test_sample_never_draws_zero_probability_tokens():
  probs = jnp.array([[0.0, 0.5, 0.0, 0.5]] * 4000)
  drawn = np.asarray(jax.vmap(sample)(jax.random.split(jax.random.key(0), 4000), probs))
  assert set(drawn.tolist()) == {1, 3}
  assert abs((drawn == 1).mean() - 0.5) < 0.05


def test_sampling_params_are_static_and_hashable():
  assert hash(SamplingParams(0.5, 3, 0.9)) == hash(SamplingParams(0.5, 3, 0.9))
  assert SamplingParams(temperature=0).greedy and not SamplingParams().greedy


def test_greedy_tokens_is_argmax_with_ties_to_the_lowest_id():
  logits = np.array(jax.random.normal(jax.random.key(3), (6, 5, 49152)))
  logits[0, 0, [7, 300, 49000]] = 50.0      # a tie: the lowest id wins, as jnp.argmax
  logits[1, 2, :] = -np.inf
  logits[1, 2, 49151] = 0.0                 # the last id, behind -inf everywhere else
  ours = np.asarray(greedy_tokens(jnp.asarray(logits)))
  np.testing.assert_array_equal(ours, np.argmax(logits, axis=-1))
  assert ours[0, 0] == 7 and ours[1, 2] == 49151
  assert 0 <= int(greedy_tokens(jnp.full((4,), jnp.nan))) < 4  # NaN logits still give an id in range


def test_draw_tokens_greedy_is_the_one_hot_argmax_and_sampled_follows_distribution():
  logits = jax.random.normal(jax.random.key(4), (3, 50))
  keys = jax.random.split(jax.random.key(5), 3)
  tokens, probs = draw_tokens(keys, logits, SamplingParams(temperature=0.0))
  np.testing.assert_array_equal(tokens, np.argmax(logits, axis=-1))
  np.testing.assert_array_equal(probs, distribution(logits, SamplingParams(temperature=0.0)))
  sampling = SamplingParams(temperature=0.7, top_k=5)
  tokens, probs = draw_tokens(keys, logits, sampling)
  np.testing.assert_array_equal(tokens, jax.vmap(sample)(keys, distribution(logits, sampling)))
  np.testing.assert_allclose(probs, distribution(logits, sampling))
