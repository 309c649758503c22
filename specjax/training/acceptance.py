"""Held-out acceptance: mean tokens per round (accepted drafts + 1) of greedy speculative decoding at K on the
benchmark suite's prompts, which training never sees (training uses `prompt_pool`)."""

import numpy as np

from specjax.benchmark.tasks import byte_ids, select
from specjax.generate import generate
from specjax.model import Model
from specjax.sampling import SamplingParams


def heldout_prompts(target: Model, categories, per_category: int, max_prompt_tokens: int = 0) -> list[tuple]:
  """(category, prompt) pairs; prompts are token-id lists for a target without a tokenizer."""
  pairs = []
  for category in categories:
    for item in select(category, per_category):
      text = item["prompt"]
      pairs.append((category, text if target.tokenizer is not None
                    else byte_ids(text, target.config.vocab_size, max_prompt_tokens)))
  return pairs


def tokens_per_round(target: Model, drafter, prompts: list[tuple], k: int = 4, max_new_tokens: int = 64) -> dict:
  """{"all": mean tokens per round over every row-round, category: the same per category, and the acceptance
  rate overall and per draft position}, from one batched call."""
  chat = target.tokenizer is not None
  result = generate(target, [p for _, p in prompts], max_new_tokens=max_new_tokens, drafter=drafter, k=k,
                    sampling=SamplingParams(temperature=0.0), chat=chat)
  rounds = result.stats.accepted_per_round
  by_category = {}
  for (category, _), accepted in zip(prompts, rounds):
    by_category.setdefault(category, []).extend(accepted)
  out = {"all": result.stats.mean_tokens_per_round, "acceptance_rate": result.stats.acceptance_rate,
         "acceptance_rate_per_position": result.stats.acceptance_rate_per_position}
  out.update({c: float(np.mean(a) + 1) if a else 0.0 for c, a in by_category.items()})
  return out
