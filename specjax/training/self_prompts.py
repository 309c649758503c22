"""Prompts the target writes itself (Magpie, Xu et al. 2024): the chat template up to the user's turn, sampled, so
that an instruction-tuned target writes the requests it was tuned on. The packaged prompt sources are templates,
and a head trained on few phrasings learns them rather than prose (docs/results.md section 52); these are as
varied as the target's own instruction data. Some turns open with a common instruction word, to weigh the writing
and explaining requests that benchmarks and users ask for. Benchmark overlaps are dropped."""

import json
import os

import tqdm

from specjax.generate import generate
from specjax.model import Model
from specjax.sampling import SamplingParams
from specjax.training import holdout
from specjax.training.files import write_json

# "" leaves the whole request to the target
STARTERS = ("", "", "", "Write", "Explain", "Describe", "Give", "Tell", "Summarize", "How", "What", "Can you", "I")
MIN_WORDS, MAX_WORDS = 4, 80
_MARK = "SPECJAX-USER-TURN"


def user_turn_prefix(target: Model) -> str:
  """The chat template's text before the user's message (system prompt included)."""
  if target.tokenizer is None or not target.tokenizer.chat_template:
    raise ValueError("self_prompts needs a target with a tokenizer and a chat template")
  rendered = target.tokenizer.render_chat(_MARK)
  return rendered[:rendered.index(_MARK)]


def usable(text: str, held_out: set) -> bool:
  """A finished request of MIN_WORDS-MAX_WORDS words, with no template tokens and no benchmark overlap."""
  return (MIN_WORDS <= len(text.split()) <= MAX_WORDS and "<|" not in text
          and not holdout.overlaps(text, held_out))


def sample_requests(target: Model, n: int, seed: int = 0, made: list[str] = (), sampled: int = 0, batch: int = 64,
                    max_tokens: int = 64, temperature: float = 1.0, top_p: float = 0.95) -> tuple[list[str], int]:
  """(every usable request found, the samples drawn) once at least n are found, continuing `made` after `sampled`
  samples; requests cut off at max_tokens, too short or too long, repeated, or overlapping a benchmark prompt are
  dropped. Starters are taken in turn, and each batch is seeded by its place: a continued list equals a fresh one."""
  if n < 0:
    raise ValueError(f"self_prompts: n must be >= 0, got {n}")
  prefix = user_turn_prefix(target)
  eos = set(target.tokenizer.eos_token_ids)
  held_out = holdout.benchmark_shingles()
  sampling = SamplingParams(temperature=temperature, top_p=top_p)
  found, seen, tries = list(made), {m.lower() for m in made}, sampled
  progress = tqdm.tqdm(total=n, initial=min(len(found), n), desc="self prompts", leave=False)
  while len(found) < n:
    if tries >= 4 * n + batch:
      raise ValueError(f"self_prompts: only {len(found)} usable requests of {n} after sampling {tries}")
    starters = [STARTERS[(tries + i) % len(STARTERS)] for i in range(batch)]
    result = generate(target, [prefix + s for s in starters], max_new_tokens=max_tokens, sampling=sampling,
                      seed=seed * 1_000_003 + tries)
    tries += batch
    for starter, tokens, text in zip(starters, result.tokens, result.texts):
      request = " ".join((starter + text).split())  # the text after a starter opens with its own space
      if tokens and tokens[-1] in eos and request.lower() not in seen and usable(request, held_out):
        seen.add(request.lower())
        found.append(request)
    progress.update(min(len(found), n) - progress.n)
  progress.close()
  return found, tries


def write_prompts(target: Model, n: int, seed: int = 0, **options) -> list[str]:
  """n distinct requests sampled from the target (`sample_requests`). Deterministic for a seed."""
  return sample_requests(target, n, seed, **options)[0][:n]


def self_prompts(target: Model, n: int, seed: int = 0, cache_path: str = "") -> list[str]:
  """`write_prompts`, read from cache_path (JSON: the requests and the samples drawn) when made before; a longer
  list continues the cached one."""
  cached = {"requests": [], "sampled": 0}
  if cache_path and os.path.exists(cache_path):
    with open(cache_path) as f:
      cached = json.load(f)
    if not isinstance(cached, dict) or not {"requests", "sampled"} <= set(cached):
      raise ValueError(f"{cache_path} is not a self_prompts cache ({{'requests': [...], 'sampled': N}}): move it away")
    if len(cached["requests"]) >= n:
      return cached["requests"][:n]
  found, sampled = sample_requests(target, n, seed, cached["requests"], cached["sampled"])
  if cache_path:
    write_json(cache_path, {"requests": found, "sampled": sampled})
  return found[:n]
