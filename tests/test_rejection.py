"""Exactness of modified rejection sampling: emitted tokens are distributed as the target's.

Unit level: `accept` on hand-made p and q. End to end: the joint distribution of the first three
generated tokens under speculative decoding equals the target's, over a grid of sampling settings,
K and drafters, checked by a chi-square test against probabilities computed from the target itself.
A deliberately wrong acceptance rule fails the same test (so the test can fail).
"""

import itertools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as scipy_stats

import specjax
from specjax import drafters
from specjax.engine import round as engine_round
from specjax.cache import init_cache
from specjax.model import model_from_flat_params
from specjax.rejection import accept
from specjax.sampling import SamplingParams, distribution

VOCAB = 8
N_TOKENS = 3
SAMPLES = 20_000
ALPHA = 1e-4  # per-test significance; seeds are fixed, so outcomes are deterministic


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
  """Pearson chi-square of observed counts against exact probabilities; cells with expected < 5 pooled."""
  counts, probs = counts.reshape(-1).astype(np.float64), probs.reshape(-1).astype(np.float64)
  probs = probs / probs.sum()
  assert counts[probs == 0].sum() == 0, "a token sequence with target probability 0 was generated"
  expected = counts.sum() * probs
  big = expected >= 5
  obs = np.append(counts[big], counts[~big].sum())
  exp = np.append(expected[big], expected[~big].sum())
  keep = exp > 0
  statistic = ((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum()
  return float(scipy_stats.chi2.sf(statistic, df=max(keep.sum() - 1, 1)))


def test_accept_greedy_is_greedy_verification():
  p = jax.nn.one_hot(jnp.array([[3, 5, 1, 2]]), VOCAB)
  q = jax.nn.one_hot(jnp.array([[3, 5, 0]]), VOCAB)
  n, nxt = accept(p, q, jnp.array([[3, 5, 0]]), jax.random.split(jax.random.key(0), 1))
  assert int(n[0]) == 2 and int(nxt[0]) == 1
  n, nxt = accept(p, p[:, :3], jnp.array([[3, 5, 1]]), jax.random.split(jax.random.key(0), 1))
  assert int(n[0]) == 3 and int(nxt[0]) == 2


def test_greedy_shortcut_equals_the_general_path():
  """accept(greedy=True) skips the draw; with one-hot p (any q) it must give the general path's tokens."""
  rng = np.random.default_rng(0)
  batch, k = 64, 3
  p = jax.nn.one_hot(jnp.asarray(rng.integers(0, VOCAB, (batch, k + 1))), VOCAB)
  q = jnp.asarray(rng.dirichlet(np.ones(VOCAB), size=(batch, k)).astype(np.float32))
  drafts = jnp.where(jnp.asarray(rng.random((batch, k)) < 0.6), jnp.argmax(p[:, :k], -1),
                     jnp.asarray(rng.integers(0, VOCAB, (batch, k))))
  keys = jax.random.split(jax.random.key(1), batch)
  n_general, next_general = accept(p, q, drafts, keys)
  n_greedy, next_greedy = accept(p, q, drafts, keys, greedy=True)
  assert (np.asarray(n_general) == np.asarray(n_greedy)).all()
  assert (np.asarray(next_general) == np.asarray(next_greedy)).all()
  assert 0 < float(np.mean(np.asarray(n_greedy))) < k


@pytest.mark.parametrize("k", [1, 3])
def test_accept_first_token_matches_p(k):
  """One row per sample: the first emitted token (draft if accepted, else correction) follows p."""
  rng = np.random.default_rng(k)
  p = rng.dirichlet(np.ones(VOCAB) * 0.5, size=k + 1).astype(np.float32)
  q = rng.dirichlet(np.ones(VOCAB) * 0.5, size=k).astype(np.float32)
  n_rows = 200_000
  keys = jax.random.split(jax.random.key(k), n_rows + 1)
  draft = jax.random.categorical(keys[0], jnp.log(jnp.asarray(q)), shape=(n_rows, k)).astype(jnp.int32)
  p_b = jnp.broadcast_to(jnp.asarray(p), (n_rows, k + 1, VOCAB))
  q_b = jnp.broadcast_to(jnp.asarray(q), (n_rows, k, VOCAB))
  n, nxt = jax.jit(accept)(p_b, q_b, draft, keys[1:])
  first = np.where(np.asarray(n) > 0, np.asarray(draft)[:, 0], np.asarray(nxt))
  assert chi_square_pvalue(np.bincount(first, minlength=VOCAB), p[0]) > ALPHA


# --- end to end -----------------------------------------------------------------------------------

TARGET_CONFIG = specjax.ModelConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64,
                                    max_seq_len=128, tie_embeddings=False)
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]  # repeats, so prompt lookup finds n-gram matches


@pytest.fixture(scope="module")
def target():
  return specjax.init_model(TARGET_CONFIG, seed=3)


@pytest.fixture(scope="module")
def anti_target(target):
  """The target with its output head negated: its top-k tokens are the target's bottom-k."""
  flat = target.flat_params()
  flat["head.kernel"] = -flat["head.kernel"]
  return model_from_flat_params(TARGET_CONFIG, flat)


def target_joint(model, prompt, sampling, n_tokens=N_TOKENS) -> np.ndarray:
  """Exact target probabilities of every continuation of length n_tokens, shape [V] * n_tokens.

  Computed without the generation loop: a fresh full forward pass per prefix."""
  forward = jax.jit(lambda params, seqs, positions, cache: model.with_params(params).module()(seqs, positions, cache))
  joint = None
  prefixes = [()]
  for step in range(n_tokens):
    seqs = np.array([list(prompt) + list(prefix) for prefix in prefixes], np.int32)
    batch, length = seqs.shape
    positions = np.broadcast_to(np.arange(length, dtype=np.int32), (batch, length))
    logits, _, _ = forward(model.params, jnp.asarray(seqs), jnp.asarray(positions), init_cache(model.config, batch, length))
    probs = np.asarray(distribution(logits[:, -1], sampling), np.float64).reshape([VOCAB] * step + [VOCAB])
    joint = probs if step == 0 else joint[..., None] * probs
    prefixes = list(itertools.product(range(VOCAB), repeat=step + 1))
  return joint


def sampled_joint(model, drafter, sampling, k, seed, n=SAMPLES) -> np.ndarray:
  result = specjax.generate(model, [PROMPT] * n, max_new_tokens=N_TOKENS, sampling=sampling, drafter=drafter, k=k,
                            seed=seed, stop_at_eos=False)
  seqs = np.array(result.tokens)
  assert seqs.shape == (n, N_TOKENS)
  return np.bincount(np.ravel_multi_index(seqs.T, [VOCAB] * N_TOKENS), minlength=VOCAB**N_TOKENS), result.stats


SAMPLING_GRID = [SamplingParams(temperature=t, top_k=tk, top_p=tp)
                 for t, tk, tp in itertools.product([0.5, 1.0, 1.5], [0, 3], [1.0, 0.8])]
K_CYCLE = [1, 2, 4]
DRAFTERS = ("same", "anti", "lookup")
# A covering design: every sampling setting once, every (drafter, K) pair at least once, and the
# anti-draft with top_k=3 (disjoint supports) at two temperatures. Each case is one compilation.
CASES = [(DRAFTERS[i % 3], sampling, K_CYCLE[(i // 3) % 3]) for i, sampling in enumerate(SAMPLING_GRID)]


def make_drafter(name, target, anti_target):
  return {"same": lambda: drafters.DraftModel(target), "anti": lambda: drafters.DraftModel(anti_target),
          "lookup": lambda: drafters.PromptLookup(max_ngram=3)}[name]()


@pytest.mark.parametrize("name,sampling,k", CASES, ids=[f"{n}-T{s.temperature}-k{s.top_k}-p{s.top_p}-K{k}"
                                                       for n, s, k in CASES])
def test_speculative_joint_distribution_equals_target(target, anti_target, name, sampling, k):
  drafter = make_drafter(name, target, anti_target)
  counts, stats = sampled_joint(target, drafter, sampling, k, seed=zlib.crc32(f"{name}{sampling}{k}".encode()) % 1000)
  probs = target_joint(target, PROMPT, sampling)
  assert chi_square_pvalue(counts, probs) > ALPHA
  if name == "same":
    assert stats.acceptance_rate == 1.0  # q == p: every draft passes
  if name == "anti" and sampling.top_k == 3:
    assert stats.acceptance_rate == 0.0  # disjoint supports: every token comes from the residual


def test_wrong_acceptance_rule_fails_the_test(target, monkeypatch):
  """Accepting a draft iff it is the target's argmax (then sampling from p) is not exact: detected."""

  def argmax_rule(p, q, draft, keys, greedy=False):
    k = draft.shape[1]
    ok = draft == jnp.argmax(p[:, :k], axis=-1)
    n = jnp.sum(jnp.cumprod(ok.astype(jnp.int32), axis=1), axis=1)
    p_at = p[jnp.arange(p.shape[0]), n]
    return n, jax.vmap(lambda key, pr: jax.random.categorical(key, jnp.log(pr)))(keys, p_at).astype(jnp.int32)

  monkeypatch.setattr(engine_round, "accept", argmax_rule)  # what engine.accept_drafts calls
  jax.clear_caches()
  sampling = SamplingParams(temperature=1.0)
  counts, _ = sampled_joint(target, drafters.DraftModel(target), sampling, k=2, seed=7)
  assert chi_square_pvalue(counts, target_joint(target, PROMPT, sampling)) < ALPHA
  monkeypatch.undo()
  jax.clear_caches()


def test_chi_square_detects_two_percent_error():
  """Power check of the test itself: moving 2% of probability mass between two cells is rejected."""
  rng = np.random.default_rng(0)
  probs = rng.dirichlet(np.ones(VOCAB**N_TOKENS) * 0.3)
  wrong = probs.copy()
  top = np.argsort(-probs)[:2]
  wrong[top[0]] += 0.02
  wrong[top[1]] -= 0.02
  assert wrong.min() >= 0
  counts = rng.multinomial(SAMPLES, wrong)
  assert chi_square_pvalue(counts, probs) < ALPHA
  assert chi_square_pvalue(rng.multinomial(SAMPLES, probs), probs) > ALPHA
