"""The benchmark's requests: prompts from specjax's suite (`specjax.benchmark.tasks`), each with its category's own
output length, in a seeded order, repeated to `num_prompts`. Text prompts for real models; token-id prompts (the
suite's UTF-8 bytes folded into a vocabulary, as the offline benchmark does) for random models without a tokenizer."""

import dataclasses

import numpy as np

from specjax.benchmark import tasks

# Tokens each category asks for: a function body, a short story, a small JSON / CSV answer, a quoted sentence after a
# long passage (prefill-heavy). `--output-len` overrides them all.
OUTPUT_LENS = {"code": 128, "prose": 128, "structured": 64, "long_context": 48}


@dataclasses.dataclass(frozen=True)
class BenchRequest:
  """One request to send: a text (or token ids), how many tokens to ask for, where it came from."""

  prompt: str | tuple[int, ...]
  output_len: int
  category: str
  prompt_id: str


def build_requests(categories=tasks.CATEGORIES, prompts_per_category: int = 0, num_prompts: int = 0, seed: int = 0,
                   output_len: int = 0, token_id_vocab: int = 0, max_prompt_tokens: int = 0) -> list[BenchRequest]:
  """num_prompts requests drawn from the first `prompts_per_category` prompts of each category (0: all of them),
  shuffled with `seed` and cycled (0 requests: each prompt once). output_len > 0 replaces the categories' lengths.
  token_id_vocab > 0 sends token ids in [1, vocab) instead of text, cut to max_prompt_tokens (0: uncut)."""
  pool = []
  for category in categories:
    for item in tasks.select(category, prompts_per_category):
      prompt = item["prompt"]
      if token_id_vocab:
        prompt = tuple(tasks.byte_ids(prompt, token_id_vocab, max_prompt_tokens))
      pool.append(BenchRequest(prompt, output_len or OUTPUT_LENS[category], category, str(item["id"])))
  if not pool:
    raise ValueError("no prompts: name at least one category")
  order = np.random.default_rng(seed).permutation(len(pool))
  count = num_prompts or len(pool)
  return [pool[order[i % len(pool)]] for i in range(count)]
