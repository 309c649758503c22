"""The target's own requests (Magpie): real SmolLM2 writes them; a random tiny target, which writes no usable
request, and a target without a chat template get clear errors."""

import json

import pytest

import specjax
from specjax.training import holdout
from specjax.training import self_prompts as sp


def test_smollm2_writes_distinct_usable_requests_deterministically(smollm2_model, tmp_path):
  prompts = sp.write_prompts(smollm2_model, 10, seed=0, batch=13)
  assert len(prompts) == len({p.lower() for p in prompts}) == 10
  held_out = holdout.benchmark_shingles()
  assert all(sp.usable(p, held_out) for p in prompts)
  # the starters are taken in turn: one batch of 13 gives each a turn, and a request keeps its starter
  assert sum(p.startswith(("Write ", "Explain ", "Describe ", "Give ", "Tell ", "Summarize ")) for p in prompts) >= 3
  assert sp.write_prompts(smollm2_model, 6, seed=0, batch=13) == prompts[:6]
  assert sp.write_prompts(smollm2_model, 6, seed=1, batch=13) != prompts[:6]
  # a list continued from its samples equals one sampled at once
  some, sampled = sp.sample_requests(smollm2_model, 3, seed=0, batch=13)
  more, _ = sp.sample_requests(smollm2_model, len(some) + 3, seed=0, made=some, sampled=sampled, batch=13)
  assert more == sp.sample_requests(smollm2_model, len(some) + 3, seed=0, batch=13)[0] and len(more) > len(some)


def test_the_cache_is_read_and_continued(smollm2_model, tmp_path):
  path = str(tmp_path / "self.json")
  with open(path, "w") as f:
    json.dump({"requests": ["A cached request about boats?"] * 2, "sampled": 0}, f)
  assert sp.self_prompts(smollm2_model, 2, cache_path=path) == ["A cached request about boats?"] * 2
  made = sp.self_prompts(smollm2_model, 3, cache_path=path)
  assert made[:2] == ["A cached request about boats?"] * 2 and made[2] != made[1]
  cached = json.load(open(path))
  assert cached["requests"][:3] == made and cached["sampled"] == 64
  with open(path, "w") as f:
    json.dump(made, f)
  with pytest.raises(ValueError, match="not a self_prompts cache"):
    sp.self_prompts(smollm2_model, 2, cache_path=path)


def test_usable_drops_unfinished_template_and_benchmark_text():
  held_out = holdout.benchmark_shingles()
  assert sp.usable("How do I keep basil alive on a windowsill?", held_out)
  assert not sp.usable("Hi there", held_out)
  assert not sp.usable(" ".join(["word"] * (sp.MAX_WORDS + 1)), held_out)
  assert not sp.usable("Tell me a story <|im_start|>assistant about a boat", held_out)
  benchmark = "Write a short story of three sentences about a lighthouse keeper who finds a message in a bottle."
  assert not sp.usable(benchmark, held_out)


def test_bad_targets_and_counts_are_refused(tiny_tokenizer):
  config = specjax.ModelConfig(vocab_size=tiny_tokenizer.vocab_size, d_model=32, n_layers=1, n_heads=4,
                               n_kv_heads=2, ffn_dim=64, max_seq_len=256)
  bare = specjax.init_model(config, seed=0)
  with pytest.raises(ValueError, match="tokenizer and a chat template"):
    sp.write_prompts(bare, 2)
  with pytest.raises(ValueError, match="n must be >= 0"):
    sp.write_prompts(bare.with_tokenizer(tiny_tokenizer), -1)
  # random bytes seldom end a turn with four words: the search stops and says how far it got
  with pytest.raises(ValueError, match="usable requests of 2 after sampling"):
    sp.write_prompts(bare.with_tokenizer(tiny_tokenizer), 2, batch=4, max_tokens=8)
