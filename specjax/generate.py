"""`generate`: encode the prompts, then the one host path (`specjax.host`): prepare the batch, run the compiled
programs, decode the results."""

import dataclasses
from typing import Sequence

import numpy as np

from specjax.calibration import Calibration
from specjax.drafters.base import Drafter
from specjax.host import prepare, prompt_bucket, run_batch  # noqa: F401  (prompt_bucket: part of this API)
from specjax.model import Model
from specjax.policy import SpeculationPolicy
from specjax.sampling import SamplingParams
from specjax.stats import GenerationStats, summarize


@dataclasses.dataclass
class GenerationResult:
  tokens: list[list[int]]          # new token ids per row (EOS included when it stopped the row)
  texts: list[str] | None          # decoded new tokens, when the target has a tokenizer
  stats: GenerationStats
  prompt_tokens: list[list[int]]


def encode_prompts(target: Model, prompts, chat: bool) -> list[list[int]]:
  if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence) or not prompts:
    raise ValueError("prompts must be a non-empty list of strings or of token-id lists")
  vocab = target.config.vocab_size
  encoded = []
  for i, prompt in enumerate(prompts):
    if isinstance(prompt, str):
      if target.tokenizer is None:
        raise ValueError("string prompts need a model with a tokenizer; pass token-id lists instead")
      ids = target.tokenizer.apply_chat_template(prompt) if chat else target.tokenizer.encode(prompt)
    else:
      if chat:
        raise ValueError("chat=True needs string prompts")
      try:
        values = np.asarray(prompt).reshape(-1).tolist() if len(prompt) else []
      except (TypeError, ValueError) as error:
        raise ValueError(f"prompt {i} is neither a string nor a list of token ids: {error}") from None
      if any(isinstance(t, bool) or not isinstance(t, int) for t in values):
        raise ValueError(f"prompt {i} holds non-integer token ids")
      ids = values
    if not ids:
      raise ValueError(f"prompt {i} is empty")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
      raise ValueError(f"prompt {i} has token ids outside the vocabulary [0, {vocab}): {bad[:5]}")
    encoded.append(ids)
  return encoded


def generate(target: Model, prompts, *, max_new_tokens: int, sampling: SamplingParams = SamplingParams(),
             seed: int = 0, drafter: Drafter | None = None, k: "int | str | SpeculationPolicy | None" = None,
             stop_at_eos: bool = True, mesh=None, chat: bool = False,
             calibration: Calibration | None = None, tree=None) -> GenerationResult:
  """Generates up to max_new_tokens per prompt: autoregressive without a drafter, speculative with one.

  k: drafts per round (default 4 with a drafter), or "auto" / a SpeculationPolicy to pick K (0 included) every
  round from the measured acceptance and the round costs measured on this machine. calibration: where those costs
  are measured and kept (pass one `specjax.Calibration` to several calls to measure once); None measures anew.
  tree: a `specjax.StaticTree` or `specjax.DynamicTree`: each round drafts its nodes and verifies them in one
    target call (k unset).
  """
  if not isinstance(target, Model):
    raise TypeError(f"target must be a specjax Model, got {type(target).__name__}")
  batch = prepare(target, encode_prompts(target, prompts, chat), max_new_tokens=max_new_tokens, sampling=sampling,
                  drafter=drafter, k=k, stop_at_eos=stop_at_eos, mesh=mesh, tree=tree)
  out = run_batch(target, batch, seed=seed, calibration=calibration)
  texts = ([target.tokenizer.decode(t, skip_special_tokens=True) for t in out.tokens]
           if target.tokenizer is not None else None)
  stats = summarize(out.accepted_RxB, out.n_new_B, out.rounds, batch.spec.max_k, out.wall_s, out.first_token_s,
                    out.k_R, tree=tree, tree_log=None if tree is None else (out.tree_rank_RxBxD1,
                                                                             out.tree_children_RxBxD1))
  return GenerationResult(tokens=out.tokens, texts=texts, stats=stats, prompt_tokens=batch.prompt_ids)
