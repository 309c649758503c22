"""The packaged-text corpus: each reader on a small fixture of its format, the licenses in the registry, the held-out
check against the benchmark prompts, and the build (shards, manifest, budgets, resume without rework)."""

import gzip
import json
import os

import numpy as np
import pytest

from specjax.benchmark import tasks
from specjax.training import holdout, shards
from specjax.training.sources import SOURCES, source
from specjax.training.sources.base import KINDS, Document
from specjax.training.text_corpus import CorpusPlan, build

BENCH_PROMPT = tasks.load_category("prose")[0]["prompt"]


def _write(path, content):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(content if isinstance(content, str) else json.dumps(content))


@pytest.fixture
def roots(tmp_path):
  """One directory per source, each with files in its package's format."""
  r = {name: str(tmp_path / name) for name in SOURCES}
  msg = lambda text, who: {"text": text, "timestamp": "2018-05-02T19:38:15Z", "sender": who}
  _write(os.path.join(r["chitchat"], "dataset.json"), {
      "b-conv": {"messages": [[msg("hello", "u1"), msg("how are you?", "u1")], [msg("fine", "u2")],
                              [msg("great", "u1")]]},
      "a-conv": {"messages": [[msg("only one turn", "u1")]]}})
  _write(os.path.join(r["wiki"], "data", "summaries_en-us.json"), {
      "Lighthouse": {"title": "Lighthouse", "extract": "A lighthouse is a tower that emits light."},
      "Copied": {"title": "Copied", "extract": f"As the prompt said: {BENCH_PROMPT}"},
      "Empty": {"title": "Empty", "extract": ""}})
  _write(os.path.join(r["awscli"], "examples", "s3", "cp.rst"), "**To copy a file**\n\n    aws s3 cp a.txt s3://b/\n")
  _write(os.path.join(r["awscli"], "examples", "s3", "notes.txt"), "not an example")
  service = {"operations": {"GetObject": {"http": {"method": "GET"}}}, "shapes": {"Key": {"type": "string"}}}
  _write(os.path.join(r["botocore"], "data", "s3", "2006-03-01", "service-2.json"), service)
  os.makedirs(os.path.join(r["botocore"], "data", "sqs", "2012-11-05"))
  with gzip.open(os.path.join(r["botocore"], "data", "sqs", "2012-11-05", "service-2.json.gz"), "wt") as f:
    json.dump({"operations": {"SendMessage": {}}}, f)
  _write(os.path.join(r["python"], "mod.py"), '"""A module."""\n\ndef f():\n  return 1\n')
  _write(os.path.join(r["python"], "test", "test_mod.py"), "assert True\n")
  return r


def test_each_reader_reads_its_format(roots):
  docs = {name: list(source(name).read(roots[name])) for name in SOURCES}
  [chat] = docs["chitchat"]     # a one-turn conversation is no dialogue
  assert chat.messages == ({"role": "user", "content": "hello\nhow are you?"}, {"role": "assistant", "content": "fine"},
                           {"role": "user", "content": "great"})
  assert [d.doc_id for d in docs["wiki"]] == ["Copied", "Lighthouse"]
  assert docs["wiki"][1].text == "Lighthouse\n\nA lighthouse is a tower that emits light."
  assert [d.doc_id for d in docs["awscli"]] == [os.path.join("s3", "cp.rst")]
  service, gzipped = docs["botocore"]
  assert [json.loads(line) for line in service.text.splitlines()] == [
      {"operations": {"GetObject": {"http": {"method": "GET"}}}}, {"shapes": {"Key": {"type": "string"}}}]
  assert gzipped.doc_id.startswith(os.path.join("sqs", "2012-11-05")) and "SendMessage" in gzipped.text
  assert [d.doc_id for d in docs["python"]] == ["mod.py"]     # tests left out


def test_the_registry_states_each_license_and_covers_every_kind():
  assert {s.kind for s in SOURCES.values()} == set(KINDS)
  for s in SOURCES.values():
    assert s.license and s.install
  assert "sharegpt" not in SOURCES       # its package states no license
  with pytest.raises(ValueError, match="unknown corpus source 'sharegpt'"):
    source("sharegpt")
  with pytest.raises(ValueError, match="text or messages"):
    Document("x", "1")


def test_benchmark_prompts_are_held_out():
  held = holdout.benchmark_shingles()
  assert holdout.overlaps(f"Intro. {BENCH_PROMPT} Outro.", held)
  assert not holdout.overlaps("A lighthouse is a tower that emits light to guide ships.", held)


def test_build_writes_shards_and_a_manifest_and_resumes(roots, tiny_tokenizer, tmp_path):
  out = str(tmp_path / "corpus")
  plan = CorpusPlan(budgets={name: 10_000 for name in SOURCES}, out_dir=out, roots=roots, shard_tokens=40)
  manifest = build(plan, tiny_tokenizer, log=lambda *_: None)
  entries = {e["name"]: e for e in manifest["sources"]}
  assert entries["wiki"]["dropped_overlapping_benchmark"] == 1 and entries["wiki"]["documents"] == 1
  assert entries["wiki"]["license"] == "CC-BY-SA-4.0" and entries["chitchat"]["kind"] == "chat"
  with open(os.path.join(out, "manifest.json")) as f:
    assert json.load(f)["tokens"] == manifest["tokens"] == sum(e["tokens"] for e in manifest["sources"])
  wiki_dir = os.path.join(out, entries["wiki"]["directory"])
  [doc] = shards.read_documents(shards.shard_path(wiki_dir, 0))
  assert tiny_tokenizer.decode(doc.tolist()) == "Lighthouse\n\nA lighthouse is a tower that emits light.<|im_end|>"  # EOS
  chat_dir = os.path.join(out, entries["chitchat"]["directory"])
  [chat] = shards.read_documents(shards.shard_path(chat_dir, 0))
  assert tiny_tokenizer.decode(chat.tolist()).startswith("<|im_start|>user\nhello\nhow are you?<|im_end|>")

  # resume: a lost last shard (and the source's done mark) is rewritten identically; other sources are not re-read
  py_dir = os.path.join(out, entries["python"]["directory"])
  before = {os.path.join(py_dir, n): open(os.path.join(py_dir, n), "rb").read()
            for n in sorted(os.listdir(py_dir)) if n.endswith(".npz")}
  last = sorted(before)[-1]
  os.remove(last), os.remove(os.path.join(py_dir, "done.json"))
  os.remove(os.path.join(roots["chitchat"], "dataset.json"))      # done: never read again
  again = build(plan, tiny_tokenizer, log=lambda *_: None)
  assert {p: open(p, "rb").read() for p in before} == before
  assert again["tokens"] == manifest["tokens"]


def test_budgets_bound_each_source(roots, tiny_tokenizer, tmp_path):
  for i in range(30):
    _write(os.path.join(roots["python"], f"m{i:02d}.py"), f"def f{i}():\n  return {i}\n" * 5)
  plan = CorpusPlan(budgets={"python": 100}, out_dir=str(tmp_path / "c"), roots={"python": roots["python"]},
                    shard_tokens=30)
  [entry] = build(plan, tiny_tokenizer, log=lambda *_: None)["sources"]
  assert 100 <= entry["tokens"] < 100 + plan.max_doc_tokens and entry["documents"] < 31
  tokens = np.concatenate([np.concatenate(shards.read_documents(s["path"]))
                           for s in shards.existing_shards(os.path.join(plan.out_dir, entry["directory"]))])
  assert tokens.size == entry["tokens"] and tokens.dtype == np.uint16


def test_bad_plans_are_named(tmp_path):
  with pytest.raises(ValueError, match="unknown corpus source 'nope'"):
    CorpusPlan(budgets={"nope": 10}, out_dir=str(tmp_path))
  with pytest.raises(ValueError, match="token budget of source 'wiki' must be an int >= 1"):
    CorpusPlan(budgets={"wiki": 0}, out_dir=str(tmp_path))
  with pytest.raises(ValueError, match=r"roots given for sources not in the plan: \['wiki'\]"):
    CorpusPlan(budgets={"python": 10}, out_dir=str(tmp_path), roots={"wiki": "/x"})
  with pytest.raises(FileNotFoundError, match="does not exist"):
    list(source("wiki").read(str(tmp_path / "missing")))
