"""The adaptive speculation policy: its choice rule, its state, and exact greedy decoding under it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import drafters
from specjax import engine
from specjax.host import pack_batch
from specjax.policy import (PolicyInputs, SpeculationPolicy, choose_branch, expected_tokens, init_policy_state,
                            update_policy_state)
from specjax.spec import DecodeSpec

CONFIG = specjax.ModelConfig(vocab_size=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64,
                             max_seq_len=160)
PROMPTS = [[1, 2, 3, 4, 5, 1, 2, 3], [7, 8], [9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 9, 10, 11, 12]]
GREEDY = specjax.SamplingParams(temperature=0.0)
POLICY = SpeculationPolicy(ks=(1, 2, 4))


def _state(alpha, streak=0, interval=4):
  return init_policy_state(POLICY).replace(alpha=jnp.float32(alpha), ar_streak=jnp.int32(streak),
                                           interval=jnp.int32(interval))


def _inputs(costs, forced=-1):
  return PolicyInputs.measured(jnp.asarray(costs), forced)


def test_expected_tokens_matches_leviathan():
  assert float(expected_tokens(jnp.float32(0.5), 3)) == pytest.approx(1.875)
  assert float(expected_tokens(jnp.float32(0.0), 4)) == pytest.approx(1.0)


def test_choice_follows_acceptance_and_cost():
  cheap = _inputs([1.0, 1.1, 1.2, 1.4])
  dear = _inputs([1.0, 2.0, 2.5, 3.5])
  assert int(choose_branch(POLICY, _state(0.9), cheap, 5)) == 3       # high acceptance, cheap rounds: largest K
  assert int(choose_branch(POLICY, _state(0.05), dear, 5)) == 0       # low acceptance: autoregressive
  assert int(choose_branch(POLICY, _state(0.9), dear, 5)) == 3        # E(0.9, 4) / 3.5 = 1.17 > 1
  assert int(choose_branch(POLICY, _state(0.5), dear, 5)) == 0        # E(0.5, K) / cost(K) < 1 for every K
  assert int(choose_branch(POLICY, _state(0.9), cheap, 0)) == 1       # starts small: first round drafts with K=1
  assert int(choose_branch(POLICY, _state(0.05), dear, 0)) == 1       # ... even when the prior says nothing pays
  assert int(choose_branch(POLICY, _state(0.05), dear, 0, tokens_left=30)) == 0   # unless it exceeds the budget
  assert int(choose_branch(POLICY, _state(0.05, streak=4), dear, 9)) == 1   # probe after `interval` AR rounds
  hopeless = _inputs([1.0, 2.1, 3.2, 5.5])                           # (K + 1) / cost(K) < 1 for every K
  assert int(choose_branch(POLICY, _state(0.05, streak=64), hopeless, 9)) == 0   # no probe can find a K that pays
  assert int(choose_branch(POLICY, _state(0.05), hopeless, 0)) == 0   # not even the first round's
  assert int(choose_branch(POLICY, _state(0.9), _inputs([1.0, 1.1, 1.2, 1.4], forced=2), 5)) == 2


def test_the_first_measured_round_replaces_the_prior():
  """The prior stands only until drafts are tested: the first speculative round's acceptance is the estimate, and
  later rounds are smoothed into it."""
  active = jnp.ones((2,), bool)
  first = update_policy_state(POLICY, init_policy_state(POLICY), jnp.int32(1), jnp.int32(1),
                              jnp.ones((2,), jnp.int32), active)
  assert bool(first.measured) and float(first.alpha) == pytest.approx(1.0)
  costly = _inputs([1.0, 1.6, 2.0, 3.0])  # a quantized self-draft's rounds: the prior 0.5 alone would stay at K=0
  assert int(choose_branch(POLICY, init_policy_state(POLICY), costly, 3)) == 0
  assert int(choose_branch(POLICY, first, costly, 1)) == 3
  second = update_policy_state(POLICY, first, jnp.int32(3), jnp.int32(4), jnp.zeros((2,), jnp.int32), active)
  assert float(second.alpha) == pytest.approx(1.0 - POLICY.smoothing)
  ar = update_policy_state(POLICY, init_policy_state(POLICY), jnp.int32(0), jnp.int32(0), jnp.zeros((2,), jnp.int32),
                           active)
  assert not bool(ar.measured) and float(ar.alpha) == pytest.approx(POLICY.prior_alpha)


def test_failed_probes_back_off_and_success_resets():
  state = _state(0.1, streak=4, interval=4)
  active = jnp.ones((2,), bool)
  failed = update_policy_state(POLICY, state, jnp.int32(1), jnp.int32(1), jnp.zeros((2,), jnp.int32), active)
  assert int(failed.interval) == 8 and int(failed.ar_streak) == 0 and float(failed.alpha) < 0.1
  paid = update_policy_state(POLICY, failed.replace(ar_streak=jnp.int32(8)), jnp.int32(1), jnp.int32(1),
                             jnp.ones((2,), jnp.int32), active)
  assert int(paid.interval) == POLICY.probe_interval and float(paid.alpha) > float(failed.alpha)
  ar = update_policy_state(POLICY, paid, jnp.int32(0), jnp.int32(0), jnp.zeros((2,), jnp.int32), active)
  assert int(ar.ar_streak) == 1 and float(ar.alpha) == pytest.approx(float(paid.alpha))


def test_probes_are_spaced_by_their_cost():
  """A failed probe costs cost(K_min) - 1 steps: the first waits until that fits probe_budget of the AR time."""
  policy = SpeculationPolicy(ks=(1, 2), probe_interval=4, max_probe_interval=64, probe_budget=0.05)
  assert int(init_policy_state(policy).interval) == 4
  assert int(init_policy_state(policy, round_cost_N=jnp.asarray([1.0, 1.1, 1.3])).interval) == 4
  assert int(init_policy_state(policy, round_cost_N=jnp.asarray([1.0, 1.6, 2.0])).interval) == 12
  assert int(init_policy_state(policy, round_cost_N=jnp.asarray([1.0, 9.0, 9.5])).interval) == 64
  state = init_policy_state(policy, round_cost_N=jnp.asarray([1.0, 1.6, 2.0])).replace(
      interval=jnp.int32(48), ar_streak=jnp.int32(48))
  paid = update_policy_state(policy, state, jnp.int32(1), jnp.int32(1), jnp.ones((2,), jnp.int32),
                             jnp.ones((2,), bool), jnp.asarray([1.0, 1.6, 2.0]))
  assert int(paid.interval) == 12                                     # a probe that paid resets the spacing
  due = init_policy_state(policy, round_cost_N=jnp.asarray([1.0, 1.6, 2.0])).replace(
      alpha=jnp.float32(0.05), ar_streak=jnp.int32(12))
  costs = _inputs([1.0, 1.6, 2.0])
  assert int(choose_branch(policy, due, costs, 20, tokens_left=12)) == 1   # 12 x 0.05 >= 0.6: the probe runs
  assert int(choose_branch(policy, due, costs, 20, tokens_left=11)) == 0   # too few tokens left to pay it back


def test_bad_policy_settings_are_named():
  with pytest.raises(ValueError, match="ks"):
    SpeculationPolicy(ks=(4, 2))
  with pytest.raises(ValueError, match="smoothing"):
    SpeculationPolicy(smoothing=0.0)
  with pytest.raises(ValueError, match="probe_budget"):
    SpeculationPolicy(probe_budget=0.0)


@pytest.fixture(scope="module")
def target():
  return specjax.init_model(CONFIG, seed=1)


@pytest.mark.parametrize("kind", ["self_draft", "small_draft", "prompt_lookup"])
def test_greedy_auto_equals_autoregressive(target, kind):
  reference = specjax.generate(target, PROMPTS, max_new_tokens=24, sampling=GREEDY).tokens
  drafter = {"self_draft": lambda: drafters.DraftModel(target),
             "small_draft": lambda: drafters.DraftModel(specjax.init_model(
                 CONFIG.replace(n_layers=1, d_model=16, n_heads=2, n_kv_heads=1, ffn_dim=24), seed=2)),
             "prompt_lookup": lambda: drafters.PromptLookup(max_ngram=3)}[kind]()
  result = specjax.generate(target, PROMPTS, max_new_tokens=24, sampling=GREEDY, drafter=drafter, k="auto")
  assert result.tokens == reference
  assert result.stats.k == 4


def _spec(target, drafter):
  return DecodeSpec(graphdef=target.graphdef, drafter=drafter, sampling=GREEDY, k=POLICY, eos_ids=(), prompt_bucket=32)


def _decode(target, drafter, rows, costs, forced=-1):
  tokens, lengths, max_new = pack_batch(rows, 64, 24)
  return engine.run(target.params, drafter.params(), jnp.asarray(tokens), jnp.asarray(lengths), jnp.asarray(max_new),
                    jax.random.key(0), spec=_spec(target, drafter), policy_inputs=_inputs(costs, forced))


def _run(target, drafter, costs, forced=-1):
  state = _decode(target, drafter, PROMPTS, costs, forced)
  rounds = int(state.round)
  return np.asarray(state.k_R)[:rounds], np.asarray(state.accepted_RxB)[:rounds]


def test_policy_speculates_when_drafts_match_and_stops_when_they_cannot(target):
  self_draft = drafters.DraftModel(target)                     # greedy drafts from the target: all accepted
  k_R, _ = _run(target, self_draft, [1.0, 1.2, 1.4, 1.8])
  assert k_R[0] == 1 and (np.diff(k_R) >= 0).all() and k_R[-1] == 4   # starts small, grows with acceptance
  never = drafters.DraftModel(specjax.init_model(CONFIG, seed=7))  # an unrelated model: drafts rarely match
  k_R, accepted = _run(target, never, [1.0, 3.0, 4.0, 6.0])
  assert (k_R == 0).mean() > 0.6                                # mostly autoregressive, with sparse probes
  k_R, _ = _run(target, never, [1.0, 3.0, 4.0, 6.0], forced=2)
  assert (k_R == 2).all()


def test_calibrated_costs_respect_the_work_done():
  """Noise that makes a longer round look cheaper than an AR step (or than a shorter round) is removed."""
  from specjax.calibration import ordered_costs
  np.testing.assert_allclose(ordered_costs([1.0, 0.87, 1.19, 1.36]), [1.0, 1.0, 1.19, 1.36], rtol=1e-6)
  np.testing.assert_allclose(ordered_costs([1.0, 1.4, 1.3, 1.9]), [1.0, 1.4, 1.4, 1.9], rtol=1e-6)


def test_no_speculative_round_where_the_drafter_sees_no_match(target):
  """Prompt lookup under the policy (every K cheap): a speculative round only where some row's suffix bigram
  occurred before; autoregressive steps otherwise."""
  rows = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15, 16]]
  lengths = np.asarray([len(r) for r in rows])
  state = _decode(target, drafters.PromptLookup(max_ngram=3), rows, [1.0, 1.0, 1.0, 1.0])
  rounds = int(state.round)
  out = np.asarray(state.tokens_BxS)
  lens_after = np.asarray(lengths)[None, :] + 1 + np.cumsum(np.asarray(state.emitted_RxB)[:rounds], axis=0)
  lens_before = np.vstack([np.asarray(lengths)[None] + 1, lens_after[:-1]])
  k_R = np.asarray(state.k_R)[:rounds]
  assert (k_R == 0).any() and (k_R > 0).any()
  for r, k in enumerate(k_R):
    has_bigram = []
    for b in range(2):
      seq = out[b, :lens_before[r, b]].tolist()
      grams = set(zip(seq[:-2], seq[1:-1]))
      has_bigram.append(tuple(seq[-2:]) in grams)
    if k > 0:
      assert any(has_bigram), (r, k)


def test_calibration_subtracts_a_zero_round_decode(target, monkeypatch):
  """The fixed cost subtracted from every timing is a decode that runs no round (one-token budget)."""
  from specjax import calibration
  calls, decode = [], calibration.decode_program

  def counted(*args, **kwargs):
    state = decode(*args, **kwargs)
    calls.append((int(args[4][0]), int(state.round)))
    return state

  monkeypatch.setattr(calibration, "decode_program", counted)
  tokens, lengths, _ = pack_batch(PROMPTS, 64, 1)
  measured = calibration.Calibration()
  spec = _spec(target, drafters.PromptLookup())
  costs = measured.round_costs(target.params, (), tokens, lengths, spec)
  assert {rounds for budget, rounds in calls if budget == 1} == {0}
  assert all(rounds > 0 for budget, rounds in calls if budget > 1)
  assert costs[0] == 1.0 and (np.diff(costs) >= 0).all()
  n_calls = len(calls)
  assert measured.round_costs(target.params, (), tokens, lengths, spec) is costs and len(calls) == n_calls  # kept
  measured.round_costs(target.params, (), tokens[:2], lengths[:2], spec)  # another batch shape: measured anew
  assert len(calls) > n_calls


def test_adaptive_decode_needs_its_policy_inputs(target):
  tokens, lengths, max_new = pack_batch(PROMPTS, 64, 4)
  with pytest.raises(ValueError, match="policy_inputs"):
    engine.run(target.params, (), jnp.asarray(tokens), jnp.asarray(lengths), jnp.asarray(max_new), jax.random.key(0),
               spec=_spec(target, drafters.PromptLookup()))
