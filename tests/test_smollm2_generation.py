"""The real SmolLM2-135M: greedy generation equals HF transformers, and greedy speculation equals greedy."""

import numpy as np
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
