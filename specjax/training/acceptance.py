"""Held-out acceptance: mean tokens per round (accepted drafts + 1) of greedy speculative decoding at K on the
benchmark suite's prompts, which training never sees (training uses `prompt_pool`); and the objective's metrics
teacher-forced on the target's own continuations of those prompts, which separate a head that does not transfer
from the training prompts from one whose inference differs from its training."""

import numpy as np

from specjax.benchmark.tasks import byte_ids, select
from specjax.drafters.trained_head import TrainedHead
from specjax.generate import generate
from specjax.model import Model
from specjax.sampling import SamplingParams
from specjax.training.corpus import pack
from specjax.training.data import Corpus, target_pass
from specjax.training.trainer import heldout_loss


def prompt_input(target: Model, text: str, max_prompt_tokens: int = 0):
  """A prompt as `generate` takes it for this target: the text, or its byte ids for a target without a tokenizer."""
  return text if target.tokenizer is not None else byte_ids(text, target.config.vocab_size, max_prompt_tokens)


def heldout_prompts(target: Model, categories, per_category: int, max_prompt_tokens: int = 0) -> list[tuple]:
  """(category, prompt) pairs; prompts are token-id lists for a target without a tokenizer."""
  return [(category, prompt_input(target, item["prompt"], max_prompt_tokens))
          for category in categories for item in select(category, per_category)]


def draft_vocab_coverage(drafter, token_lists) -> float | None:
  """The fraction of these target tokens that a drafter with a draft vocabulary can propose at all (drafts outside
  it never happen, so it bounds greedy acceptance); None for a drafter over the whole vocabulary."""
  if not isinstance(drafter, TrainedHead) or drafter.config.draft_vocab_size == drafter.config.vocab_size:
    return None
  tokens = np.concatenate([np.asarray(t, np.int64) for t in token_lists] + [np.zeros(0, np.int64)])
  return float(np.isin(tokens, np.asarray(drafter.frozen["vocab_ids"])).mean()) if tokens.size else None


def tokens_per_round(target: Model, drafter, prompts: list[tuple], k: int = 4, max_new_tokens: int = 64) -> dict:
  """{"all": mean tokens per round over every row-round, category: the same per category, the acceptance rate
  overall and per draft position, and the draft vocabulary's coverage of the tokens}, from one batched call."""
  chat = target.tokenizer is not None
  result = generate(target, [p for _, p in prompts], max_new_tokens=max_new_tokens, drafter=drafter, k=k,
                    sampling=SamplingParams(temperature=0.0), chat=chat)
  rounds = result.stats.accepted_per_round
  by_category = {}
  for (category, _), accepted in zip(prompts, rounds):
    by_category.setdefault(category, []).extend(accepted)
  out = {"all": result.stats.mean_tokens_per_round, "acceptance_rate": result.stats.acceptance_rate,
         "acceptance_rate_per_position": result.stats.acceptance_rate_per_position,
         "draft_vocab_coverage": draft_vocab_coverage(drafter, result.tokens)}
  out.update({c: float(np.mean(a) + 1) if a else 0.0 for c, a in by_category.items()})
  return out


def greedy_continuations(target: Model, prompts: list[tuple], max_new_tokens: int, layer_ids=()) -> Corpus:
  """The target's greedy continuations of these prompts with its features (one target pass, `layer_ids` kept), as
  a Corpus whose rows are all held out and whose mask marks the positions with a generated next token (where
  greedy acceptance is decided)."""
  result = generate(target, [p for _, p in prompts], max_new_tokens=max_new_tokens,
                    sampling=SamplingParams(temperature=0.0), chat=target.tokenizer is not None)
  sequences = [p + t for p, t in zip(result.prompt_tokens, result.tokens)]
  length = max(map(len, sequences))
  tokens_NxT, _ = pack(sequences, length + -length % 8)
  scored_NxT = np.zeros(tokens_NxT.shape, bool)
  for row, (prompt, sequence) in enumerate(zip(result.prompt_tokens, sequences)):
    scored_NxT[row, len(prompt) - 1:len(sequence) - 1] = True
  layer_ids = tuple(sorted(set(layer_ids)))
  hidden, layers = target_pass(target, tokens_NxT, layer_ids)
  every = np.ones(len(tokens_NxT), bool)
  return Corpus(tokens=tokens_NxT, mask=scored_NxT, hidden=hidden, layers=layers, layer_ids=layer_ids,
                heldout=every, on_policy=every)


def teacher_forced(objective, params, continuations: Corpus) -> dict:
  """The objective's metrics (KL and top-1 agreement per draft step) for trainable `params` on the continuations
  (from `greedy_continuations`), over their scored positions, in one batch."""
  metrics = heldout_loss(objective, continuations, params, batch_size=len(continuations.tokens))
  return {name.removeprefix("heldout_"): value for name, value in metrics.items()}
