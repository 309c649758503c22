"""The real SmolLM2-135M: greedy generation equals HF transformers, and greedy speculation equals greedy."""

import pytest

import specjax
from specjax import drafters
from specjax.drafters import truncated_model

GREEDY = specjax.SamplingParams(temperature=0.0)
PROMPTS = [
    "The history of the printing press begins",
    "def merge_sort(items):\n    \"\"\"Sort a list with merge sort.\"\"\"\n",
    "Here is a JSON object describing a book: {\"title\": \"",
    "Water boils at 100 degrees Celsius at sea level. At higher altitudes, the boiling point",
]


@pytest.fixture(scope="module")
def prompt_ids(smollm2_model):
  return [smollm2_model.tokenizer.encode(p) for p in PROMPTS]


@pytest.fixture(scope="module")
def greedy_64(smollm2_model, prompt_ids):
  return specjax.generate(smollm2_model, prompt_ids, max_new_tokens=64, sampling=GREEDY).tokens


def test_greedy_64_tokens_equal_transformers(smollm2_model, hf_smollm2, prompt_ids, greedy_64):
  import torch
  for ids, ours in zip(prompt_ids[:3], greedy_64):
    with torch.no_grad():
      out = hf_smollm2.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                max_new_tokens=64, do_sample=False, eos_token_id=list(smollm2_model.config.eos_token_ids),
                                pad_token_id=smollm2_model.config.eos_token_ids[0])
    reference = out[0, len(ids):].tolist()
    assert ours == reference


@pytest.fixture(scope="module")
def draft(smollm2_model):
  return drafters.DraftModel(truncated_model(smollm2_model, 6))


@pytest.mark.parametrize("k", [1, 4, 8])
@pytest.mark.parametrize("kind", ["draft_model", "prompt_lookup"])
def test_speculative_greedy_equals_greedy_batch_4(smollm2_model, prompt_ids, greedy_64, draft, kind, k):
  drafter = draft if kind == "draft_model" else drafters.PromptLookup()
  result = specjax.generate(smollm2_model, prompt_ids, max_new_tokens=64, sampling=GREEDY, drafter=drafter, k=k)
  assert result.tokens == greedy_64
  assert sum(map(len, result.stats.accepted_per_round)) > 0


@pytest.mark.parametrize("kind", ["draft_model", "prompt_lookup"])
def test_speculative_greedy_equals_greedy_batch_1(smollm2_model, prompt_ids, greedy_64, draft, kind):
  drafter = draft if kind == "draft_model" else drafters.PromptLookup()
  result = specjax.generate(smollm2_model, prompt_ids[1:2], max_new_tokens=64, sampling=GREEDY, drafter=drafter, k=4)
  assert result.tokens == greedy_64[1:2]


def test_bfloat16_end_to_end(smollm2_path, prompt_ids, greedy_64):
  """dtype="bfloat16": the whole model and cache in bf16 (XLA's dot; the CPU kernel is float32 only). bf16 logits
  of a position differ by rounding between a K+1-position verify call and a one-position step, so greedy
  speculation and greedy decoding may part at a near-tie (seen here after 12 tokens); they agree before that, and
  bf16 greedy starts like float32 greedy."""
  import jax.numpy as jnp
  model = specjax.load_model(smollm2_path, dtype="bfloat16")
  assert all(x.dtype == jnp.bfloat16 for x in model.flat_params().values())
  ar = specjax.generate(model, prompt_ids[:2], max_new_tokens=16, sampling=GREEDY).tokens
  spec = specjax.generate(model, prompt_ids[:2], max_new_tokens=16, sampling=GREEDY,
                          drafter=drafters.PromptLookup(max_ngram=3), k=4).tokens
  assert all(s_[:8] == a[:8] for s_, a in zip(spec, ar))
  assert all(a[:4] == f[:4] for a, f in zip(ar, greedy_64))
