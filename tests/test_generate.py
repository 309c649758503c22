"""The generation loop on tiny random models: batching, exact greedy speculation, stops, stats, bad input."""

import numpy as np
import pytest

import specjax
from specjax import drafters
from specjax.generate import prompt_bucket

CONFIG = specjax.ModelConfig(vocab_size=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64,
                             max_seq_len=160)
DRAFT_CONFIG = CONFIG.replace(n_layers=1, d_model=16, n_heads=2, n_kv_heads=1, ffn_dim=24)
PROMPTS = [[1, 2, 3, 4, 5, 1, 2, 3], [7, 8], [9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 9, 10, 11, 12, 13, 14]]
GREEDY = specjax.SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def target():
  return specjax.init_model(CONFIG, seed=1)


@pytest.fixture(scope="module")
def greedy_reference(target):
  return specjax.generate(target, PROMPTS, max_new_tokens=24, sampling=GREEDY).tokens


def test_batch_of_different_lengths_equals_each_prompt_alone(target, greedy_reference):
  for prompt, expected in zip(PROMPTS, greedy_reference):
    assert specjax.generate(target, [prompt], max_new_tokens=24, sampling=GREEDY).tokens == [expected]


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("kind", ["small_draft", "self_draft", "prompt_lookup"])
def test_greedy_speculation_equals_autoregressive(target, greedy_reference, kind, k):
  drafter = {"small_draft": lambda: drafters.DraftModel(specjax.init_model(DRAFT_CONFIG, seed=2)),
             "self_draft": lambda: drafters.DraftModel(target),
             "prompt_lookup": lambda: drafters.PromptLookup(max_ngram=3)}[kind]()
  result = specjax.generate(target, PROMPTS, max_new_tokens=24, sampling=GREEDY, drafter=drafter, k=k)
  assert result.tokens == greedy_reference
  if kind == "self_draft":
    assert result.stats.acceptance_rate == 1.0
    assert result.stats.mean_tokens_per_round == k + 1 or result.stats.rounds * (k + 1) >= 23


def test_stats_follow_their_definitions(target):
  result = specjax.generate(target, PROMPTS, max_new_tokens=17, sampling=GREEDY, drafter=drafters.PromptLookup(),
                            k=4)
  stats = result.stats
  assert stats.k == 4 and len(stats.accepted_per_round) == 3
  for row, accepted in enumerate(stats.accepted_per_round):
    assert all(0 <= a <= 4 for a in accepted)
    # first token from prefill + (accepted + 1) per round, cut at max_new_tokens in the last round
    assert 1 + sum(a + 1 for a in accepted[:-1]) < 17 <= 1 + sum(a + 1 for a in accepted)
    assert stats.new_tokens[row] == 17
  flat = [a for row in stats.accepted_per_round for a in row]
  assert stats.mean_accepted_per_round == pytest.approx(np.mean(flat))
  assert stats.mean_tokens_per_round == pytest.approx(np.mean(flat) + 1)
  assert stats.acceptance_rate == pytest.approx(np.sum(flat) / (4 * len(flat)))
  assert stats.bonus_rate + stats.correction_rate == pytest.approx(1.0)
  assert stats.bonus_rate == pytest.approx(np.mean([a == 4 for a in flat]))
  first = sum(a >= 1 for a in flat) / len(flat)
  assert stats.acceptance_rate_per_position[0] == pytest.approx(first)


def test_rows_stop_at_eos_independently(target, greedy_reference):
  eos = greedy_reference[0][5]
  model = specjax.Model(target.config.replace(eos_token_ids=(eos,)), target.graphdef, target.params)
  result = specjax.generate(model, PROMPTS, max_new_tokens=24, sampling=GREEDY, drafter=drafters.PromptLookup(), k=3)
  for tokens, reference in zip(result.tokens, greedy_reference):
    cut = reference.index(eos) + 1 if eos in reference else len(reference)
    assert tokens == reference[:cut]
  assert specjax.generate(model, PROMPTS, max_new_tokens=24, sampling=GREEDY, stop_at_eos=False).tokens == \
      greedy_reference


def test_copies_of_one_prompt_are_independent_samples(target):
  result = specjax.generate(target, [PROMPTS[0]] * 8, max_new_tokens=8, sampling=specjax.SamplingParams(1.5),
                            seed=3)
  assert len({tuple(t) for t in result.tokens}) > 1
  again = specjax.generate(target, [PROMPTS[0]] * 8, max_new_tokens=8, sampling=specjax.SamplingParams(1.5), seed=3)
  assert again.tokens == result.tokens  # same seed, same samples


def test_prompt_buckets_are_powers_of_two():
  assert [prompt_bucket(n) for n in (1, 16, 17, 100, 129)] == [16, 16, 32, 128, 256]


@pytest.mark.parametrize("kwargs,match", [
    (dict(prompts=[[]]), "prompt 0 is empty"),
    (dict(prompts=[]), "non-empty list"),
    (dict(prompts=[[1, 2, 99]]), "outside the vocabulary"),
    (dict(prompts=[[1, -1]]), "outside the vocabulary"),
    (dict(prompts=["hello"]), "tokenizer"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(max_new_tokens=158), "exceeds the target's max_seq_len"),
    (dict(drafter=drafters.PromptLookup(), k=0), "k must be >= 1"),
    (dict(drafter=drafters.PromptLookup(), k=65), "max_k"),
    (dict(drafter=drafters.PromptLookup(), k=8, max_new_tokens=150), "k 8"),
])
def test_bad_input_is_named(target, kwargs, match):
  args = dict(prompts=[[1, 2, 3]], max_new_tokens=4)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    specjax.generate(target, args.pop("prompts"), **args)


@pytest.mark.parametrize("kwargs,match", [
    (dict(temperature=-0.5), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(top_k=-1), "top_k"),
    (dict(temperature=float("nan")), "temperature"),
])
def test_bad_sampling_params_are_named(kwargs, match):
  with pytest.raises(ValueError, match=match):
    specjax.SamplingParams(**kwargs)


def test_drafter_with_another_vocabulary_is_rejected(target):
  other = specjax.init_model(DRAFT_CONFIG.replace(vocab_size=48), seed=2)
  with pytest.raises(ValueError, match="vocabulary"):
    specjax.generate(target, PROMPTS, max_new_tokens=4, drafter=drafters.DraftModel(other))


def test_drafter_shorter_than_request_is_rejected(target):
  short = specjax.init_model(DRAFT_CONFIG.replace(max_seq_len=32), seed=2)
  with pytest.raises(ValueError, match="drafter's max_seq_len"):
    specjax.generate(target, PROMPTS, max_new_tokens=20, drafter=drafters.DraftModel(short))
