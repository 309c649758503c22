"""The packaged text corpus (issue 21): every configured source read, held-out-checked, tokenized (chat through the
target's template) and written as token shards per source, with a manifest of sources, licenses and counts.

Resumable and cached by content: a source's shards live under a key of (source, reader version, tokenizer, budget,
shard size); whole shards found there are kept and their documents skipped, and a finished source is not read again.
"""

import dataclasses
import datetime
import hashlib
import json
import os
import time

import tqdm

from specjax.training import holdout, shards
from specjax.training.files import write_json
from specjax.training.sources import source

READER_VERSION = 1


@dataclasses.dataclass(frozen=True)
class CorpusPlan:
  """Sources and their token budgets ({name: max tokens}), where they come from ({name: directory}, "" = the
  installed package), the output directory and the shard size."""

  budgets: dict
  out_dir: str
  roots: dict = dataclasses.field(default_factory=dict)
  shard_tokens: int = 1_000_000
  max_doc_tokens: int = 4096      # a longer document is cut (training sequences are shorter anyway)

  def __post_init__(self):
    for name, budget in self.budgets.items():
      source(name)
      if not isinstance(budget, int) or budget < 1:
        raise ValueError(f"the token budget of source {name!r} must be an int >= 1, got {budget!r}")
    if self.shard_tokens < 1 or self.max_doc_tokens < 2:
      raise ValueError("shard_tokens must be >= 1 and max_doc_tokens >= 2")
    unknown = set(self.roots) - set(self.budgets)
    if unknown:
      raise ValueError(f"roots given for sources not in the plan: {sorted(unknown)}")


def tokenizer_fingerprint(tokenizer) -> str:
  vocab = json.dumps(sorted(tokenizer.backend.get_vocab(with_added_tokens=True).items()))
  return hashlib.sha256((vocab + (tokenizer.chat_template or "")).encode()).hexdigest()[:16]


def document_ids(tokenizer, document, max_tokens: int) -> list[int]:
  """A document's tokens, EOS-terminated: a conversation through the chat template, text as it is."""
  if document.messages:
    ids = tokenizer.apply_chat_template(list(document.messages), add_generation_prompt=False)
  else:
    ids = tokenizer.encode(document.text) + [tokenizer.eos_token_ids[0]]
  return ids[:max_tokens]


def build_source(name: str, plan: CorpusPlan, tokenizer, held_out: set, log=print) -> dict:
  """One source's shards (resuming what is on disk); its manifest entry."""
  src = source(name)
  budget = plan.budgets[name]
  key = hashlib.sha256(json.dumps([name, READER_VERSION, tokenizer_fingerprint(tokenizer), budget, plan.shard_tokens,
                                   plan.max_doc_tokens]).encode()).hexdigest()[:12]
  directory = os.path.join(plan.out_dir, name, key)
  done_path = os.path.join(directory, "done.json")
  if os.path.exists(done_path):
    with open(done_path) as f:
      return json.load(f)
  os.makedirs(directory, exist_ok=True)
  existing = shards.existing_shards(directory)
  skip_docs, tokens = sum(s["documents"] for s in existing), sum(s["tokens"] for s in existing)
  dtype = shards.token_dtype(tokenizer.vocab_size)
  read_docs, dropped, pending, pending_tokens, index, resumed_at = 0, 0, [], 0, len(existing), tokens
  start = time.perf_counter()
  bar = tqdm.tqdm(total=budget, initial=tokens, unit="tok", desc=name, unit_scale=True, mininterval=2.0)
  for document in src.read(plan.roots.get(name, "")):
    text = document.text or "\n".join(m["content"] for m in document.messages)
    if holdout.overlaps(text, held_out):
      dropped += 1
      continue
    read_docs += 1
    if read_docs <= skip_docs:
      continue
    ids = document_ids(tokenizer, document, plan.max_doc_tokens)
    pending.append(ids)
    pending_tokens += len(ids)
    bar.update(len(ids))
    if pending_tokens >= plan.shard_tokens or tokens + pending_tokens >= budget:
      tokens += shards.write_shard(shards.shard_path(directory, index), pending, dtype)
      pending, pending_tokens, index = [], 0, index + 1
      if tokens >= budget:
        break
  if pending:
    tokens += shards.write_shard(shards.shard_path(directory, index), pending, dtype)
  bar.close()
  seconds = time.perf_counter() - start
  entry = {"name": name, "kind": src.kind, "license": src.license, "license_note": src.license_note,
           "install": src.install, "directory": os.path.relpath(directory, plan.out_dir),
           "documents": sum(s["documents"] for s in shards.existing_shards(directory)), "tokens": tokens,
           "budget": budget, "dropped_overlapping_benchmark": dropped, "seconds": round(seconds, 1),
           "tokens_per_minute": round(60 * (tokens - resumed_at) / max(seconds, 1e-9))}
  write_json(done_path, entry)
  log(f"{name}: {entry['documents']} documents, {tokens:,} tokens ({src.kind}, {src.license}); "
      f"{dropped} dropped for overlapping the benchmark")
  return entry


def build(plan: CorpusPlan, tokenizer, log=print) -> dict:
  """Every source of the plan; writes and returns the manifest."""
  held_out = holdout.benchmark_shingles()
  start = time.perf_counter()
  entries = [build_source(name, plan, tokenizer, held_out, log) for name in plan.budgets]
  by_kind = {}
  for entry in entries:
    by_kind[entry["kind"]] = by_kind.get(entry["kind"], 0) + entry["tokens"]
  manifest = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "tokenizer": tokenizer_fingerprint(tokenizer), "held_out": "benchmark prompts (8-word overlap)",
              "sources": entries, "tokens": sum(e["tokens"] for e in entries), "tokens_by_kind": by_kind,
              "seconds": round(time.perf_counter() - start, 1)}
  os.makedirs(plan.out_dir, exist_ok=True)
  path = os.path.join(plan.out_dir, "manifest.json")
  write_json(path, manifest)
  return manifest
