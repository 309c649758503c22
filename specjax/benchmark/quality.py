"""Quality per category, so that "faster" never hides "worse".

code: share of outputs whose function parses and passes the prompt's small tests (run in
`specjax.benchmark.sandbox` with a timeout); structured: share that parses as the requested JSON / CSV;
prose: distinct-bigram ratio (1 = no repetition loops); long_context: share of output word trigrams found in the
passage (grounding), and for quoting prompts whether the expected phrase is reproduced.
For sampled runs, `agree` compares a method's mean with the autoregressive mean within a 95% interval.
"""

import ast
import csv
import io
import json
import math
import re

import numpy as np

from specjax.benchmark import sandbox

PRIMARY = {"code": "passes_tests", "structured": "parses", "prose": "distinct_2", "long_context": "grounded"}
_FENCE = re.compile(r"```[a-zA-Z]*\n?(.*?)(```|$)", re.S)


def extract_block(text: str) -> str:
  """The first fenced block's content (an unterminated fence runs to the end), else the whole text."""
  match = _FENCE.search(text)
  return (match.group(1) if match else text).strip()


def run_tests(code: str, tests, timeout_s: float = 5.0) -> bool:
  """True when the code followed by the tests exits 0 in the sandbox within timeout_s; False for a failure, a
  timeout, a call the sandbox refuses or a sandbox error."""
  return sandbox.run(code + "\n\n" + "\n".join(tests) + "\n", timeout_s).ok


def score_code(text: str, spec: dict, execute: bool = True) -> dict:
  code = extract_block(text)
  try:
    tree = ast.parse(code)
  except SyntaxError:
    return {"parses": 0.0, "passes_tests": 0.0}
  defined = any(isinstance(n, ast.FunctionDef) and n.name == spec["entry_point"] for n in ast.walk(tree))
  passes = float(defined and execute and run_tests(code, spec["tests"]))
  return {"parses": float(defined), "passes_tests": passes}


def _parse_json(text: str) -> bool:
  block = extract_block(text)
  candidates = [block]
  start = min([i for i in (block.find("{"), block.find("[")) if i >= 0], default=-1)
  if start > 0:
    candidates.append(block[start:])
  for candidate in candidates:
    try:
      json.loads(candidate)
      return True
    except ValueError:
      pass
  return False


def _parse_csv(text: str) -> bool:
  lines = [line for line in extract_block(text).splitlines() if line.strip()]
  if len(lines) < 2:
    return False
  rows = list(csv.reader(io.StringIO("\n".join(lines))))
  width = len(rows[0])
  return width >= 2 and all(len(row) == width for row in rows)


def score_structured(text: str, spec: dict) -> dict:
  ok = _parse_json(text) if spec["format"] == "json" else _parse_csv(text)
  return {"parses": float(ok)}


def _ngrams(words, n):
  return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]


def score_prose(text: str, spec: dict) -> dict:
  bigrams = _ngrams(text.split(), 2)
  return {"distinct_2": len(set(bigrams)) / len(bigrams) if bigrams else 0.0}


def _words(text: str) -> list[str]:
  return re.findall(r"[a-z0-9']+", text.lower())


def score_long_context(text: str, spec: dict) -> dict:
  grams = _ngrams(_words(text), 3)
  source = set(_ngrams(_words(spec["passage"]), 3))
  scores = {"grounded": sum(g in source for g in grams) / len(grams) if grams else 0.0}
  if spec.get("expected"):
    scores["quotes_expected"] = float(" ".join(_words(spec["expected"])) in " ".join(_words(text)))
  return scores


def score(category: str, text: str | None, spec: dict, execute_code: bool = True) -> dict:
  text = text or ""
  if category == "code":
    return score_code(text, spec, execute_code)
  if category == "structured":
    return score_structured(text, spec)
  if category == "prose":
    return score_prose(text, spec)
  if category == "long_context":
    return score_long_context(text, spec)
  raise ValueError(f"unknown category {category!r}")


def aggregate(category: str, scores: list[dict]) -> dict:
  """Mean of every metric over outputs, and a 95% interval of the primary one (normal approximation)."""
  primary = PRIMARY[category]
  out = {"metric": primary, "n": len(scores)}
  for name in sorted({k for s in scores for k in s}):
    values = [s[name] for s in scores if name in s]
    out[name] = float(np.mean(values)) if values else None
  values = np.asarray([s[primary] for s in scores], np.float64)
  mean = float(values.mean()) if values.size else 0.0
  se = float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else 0.0
  out.update(value=mean, se=se, ci95=[mean - 1.96 * se, mean + 1.96 * se])
  return out


def agree(a: dict, b: dict) -> bool:
  """True when the difference of the primary means lies within 1.96 standard errors of the difference
  (with a floor so that two runs of identical constant scores agree)."""
  se = math.sqrt(a["se"] ** 2 + b["se"] ** 2)
  return abs(a["value"] - b["value"]) <= max(1.96 * se, 1e-9)
