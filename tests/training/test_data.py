"""The corpus cache (specjax.training.data): the target's on-policy text is generated once per generation setting,
so a config that changes only the other text reuses it."""

import dataclasses

import numpy as np
import pytest

from specjax.training import corpus as corpus_module
from specjax.training import everyday as everyday_module
from specjax.training import passages as passages_module
from specjax.training import self_prompts as self_prompts_module
from specjax.training import task_prompts as task_prompts_module
from specjax.training.data import build_corpus
from specjax.training.passages import passage_prompts


def test_other_text_changes_reuse_the_generated_text(peaked_target, tiny_corpus_config, tmp_path, monkeypatch):
  corpus = tiny_corpus_config
  first = build_corpus(peaked_target, corpus, layer_ids=(1,), cache_dir=str(tmp_path))

  def not_again(*args, **kwargs):
    raise AssertionError("the on-policy text was generated again")

  monkeypatch.setattr(corpus_module, "on_policy_ids", not_again)
  more_library = dataclasses.replace(corpus, stdlib_sequences=corpus.stdlib_sequences + 4)
  second = build_corpus(peaked_target, more_library, layer_ids=(1,), cache_dir=str(tmp_path))
  n = int(first.on_policy.sum())
  assert n == int(second.on_policy.sum()) == corpus.n_prompts
  np.testing.assert_array_equal(first.tokens[:n], second.tokens[:n])
  assert len(second.tokens) == len(first.tokens) + 4
  np.testing.assert_array_equal(first.hidden[:n], second.hidden[:n])


def test_a_generation_setting_regenerates(peaked_target, tiny_corpus_config, tmp_path, monkeypatch):
  corpus = tiny_corpus_config
  build_corpus(peaked_target, corpus, layer_ids=(1,), cache_dir=str(tmp_path))
  calls = []
  real = corpus_module.on_policy_ids
  monkeypatch.setattr(corpus_module, "on_policy_ids", lambda *a, **k: calls.append(1) or real(*a, **k))
  build_corpus(peaked_target, dataclasses.replace(corpus, max_new_tokens=corpus.max_new_tokens - 4), layer_ids=(1,),
               cache_dir=str(tmp_path))
  assert calls == [1]


def test_on_policy_rows_weighted_up_come_that_often_an_epoch(tiny_corpus):
  from specjax.training.data import step_rows
  from specjax.training.trainer import TrainConfig
  rows = tiny_corpus.epoch_rows(3)
  train, on_policy = tiny_corpus.train_rows, tiny_corpus.train_rows[tiny_corpus.on_policy[tiny_corpus.train_rows]]
  assert 0 < len(on_policy) < len(train) and len(rows) == len(train) + 2 * len(on_policy)
  epoch = np.concatenate([step_rows(rows, 1, step, seed=0) for step in range(len(rows))])
  counts = np.bincount(epoch, minlength=len(tiny_corpus.tokens))
  assert (counts[on_policy] == 3).all() and (counts[np.setdiff1d(train, on_policy)] == 1).all()
  assert counts[tiny_corpus.heldout_rows].sum() == 0
  np.testing.assert_array_equal(tiny_corpus.epoch_rows(), train)
  with pytest.raises(ValueError, match="on_policy_repeats must be >= 1"):
    TrainConfig(on_policy_repeats=0)


def test_passage_answers_join_the_on_policy_rows_and_the_pool_answers_are_kept(peaked_target, tiny_corpus_config,
                                                                                tmp_path, monkeypatch):
  corpus = tiny_corpus_config
  first = build_corpus(peaked_target, corpus, layer_ids=(1,), cache_dir=str(tmp_path))
  prompts_answered = []
  real = corpus_module.on_policy_ids
  monkeypatch.setattr(corpus_module, "on_policy_ids",
                      lambda target, prompts, config: prompts_answered.extend(prompts) or real(target, prompts, config))
  with_passages = dataclasses.replace(corpus, passage_prompts=3)
  second = build_corpus(peaked_target, with_passages, layer_ids=(1,), cache_dir=str(tmp_path))
  assert prompts_answered == passage_prompts(3, corpus.seed)   # the pool's answers came from the cache
  n = corpus.n_prompts
  assert int(second.on_policy.sum()) == n + 3 and second.on_policy[:n + 3].all()
  np.testing.assert_array_equal(first.tokens[:n], second.tokens[:n])
  np.testing.assert_array_equal(first.tokens[n:], second.tokens[n + 3:])
  prompts_answered.clear()
  again = build_corpus(peaked_target, with_passages, layer_ids=(1,), cache_dir=str(tmp_path))
  assert prompts_answered == []
  np.testing.assert_array_equal(again.tokens, second.tokens)


@pytest.mark.parametrize("module, field", [(task_prompts_module, "task_prompts"), (everyday_module, "everyday_prompts"),
                                           (self_prompts_module, "self_prompts")])
def test_prompt_set_answers_follow_the_passage_answers(peaked_target, tiny_corpus_config, tmp_path, monkeypatch,
                                                       module, field):
  """`task_prompts`, `everyday_prompts` and `self_prompts` answers join the on-policy rows after the pool's and the
  passages' (both from the cache); the target's own requests are written into the cache directory."""
  prompts = ["Write a paragraph about Nigeria.", "Write a short poem about okra."]
  written = []
  if field == "self_prompts":
    monkeypatch.setattr(module, field, lambda target, n, seed, path: written.append(path) or prompts[:n])
  else:
    monkeypatch.setattr(module, field, lambda n, seed: prompts[:n])
  corpus = dataclasses.replace(tiny_corpus_config, passage_prompts=2)
  first = build_corpus(peaked_target, corpus, layer_ids=(1,), cache_dir=str(tmp_path))
  prompts_answered = []
  real = corpus_module.on_policy_ids
  monkeypatch.setattr(corpus_module, "on_policy_ids",
                      lambda target, prompts, config: prompts_answered.extend(prompts) or real(target, prompts, config))
  second = build_corpus(peaked_target, dataclasses.replace(corpus, **{field: 2}), layer_ids=(1,),
                        cache_dir=str(tmp_path))
  assert prompts_answered == prompts
  n = int(first.on_policy.sum())
  assert n == corpus.n_prompts + 2 and int(second.on_policy.sum()) == n + 2 and second.on_policy[:n + 2].all()
  np.testing.assert_array_equal(first.tokens[:n], second.tokens[:n])
  np.testing.assert_array_equal(first.tokens[n:], second.tokens[n + 2:])
  if field == "self_prompts":
    assert len(written) == 1 and written[0].startswith(str(tmp_path)) and written[0].endswith(".json")
  with pytest.raises(ValueError, match=f"{field} must be >= 0"):
    dataclasses.replace(corpus, **{field: -1})


def test_bf16_gemm_features_are_their_own_store_near_the_float32_ones(peaked_target, tiny_corpus_config, tmp_path,
                                                                       monkeypatch):
  """`feature_gemm="bfloat16"` keys its own feature store (never reused for, nor copied into, the float32 one), reuses
  the generated text, and gives features within a few percent of the float32 pass's."""
  exact = build_corpus(peaked_target, tiny_corpus_config, layer_ids=(1,), cache_dir=str(tmp_path))
  monkeypatch.setattr(corpus_module, "on_policy_ids", lambda *a, **k: pytest.fail("the on-policy text was generated"))
  fast = build_corpus(peaked_target, dataclasses.replace(tiny_corpus_config, feature_gemm="bfloat16"), layer_ids=(1,),
                      cache_dir=str(tmp_path))
  np.testing.assert_array_equal(fast.tokens, exact.tokens)
  exact_layers, fast_layers = np.asarray(exact.layers, np.float32), np.asarray(fast.layers, np.float32)
  assert not np.array_equal(fast_layers, exact_layers)
  assert np.median(np.abs(fast_layers - exact_layers)) < 0.03 * np.median(np.abs(exact_layers))
  assert len(list(tmp_path.glob("features-*"))) == 2
  again = build_corpus(peaked_target, tiny_corpus_config, layer_ids=(1,), cache_dir=str(tmp_path))
  np.testing.assert_array_equal(np.asarray(again.layers), np.asarray(exact.layers))


def test_an_unknown_feature_gemm_is_refused(tiny_corpus_config):
  with pytest.raises(ValueError, match="feature_gemm must be one of"):
    dataclasses.replace(tiny_corpus_config, feature_gemm="float16")


def test_long_passage_answers_are_a_long_part_and_the_rest_is_unchanged(peaked_target, tiny_corpus_config, tmp_path,
                                                                         monkeypatch):
  """`long_passage_prompts`: their answers are packed to long_seq_len as the corpus's `long` part (its own cache and
  feature store), and the corpus of seq_len rows is the one made without them, from the cache."""
  prompts = ["A passage about a river and a mill. It is long.\n\nSummarize the passage above.",
             "A passage about a harbour. It has ships.\n\nCopy the opening sentence of the passage above."]
  monkeypatch.setattr(passages_module, "long_passage_prompts", lambda n, seed: prompts[:n])
  plain = build_corpus(peaked_target, tiny_corpus_config, layer_ids=(1,), cache_dir=str(tmp_path))
  answered = []
  real = corpus_module.on_policy_ids
  monkeypatch.setattr(corpus_module, "on_policy_ids",
                      lambda target, prompts, config: answered.append((prompts, config.seq_len))
                      or real(target, prompts, config))
  config = dataclasses.replace(tiny_corpus_config, long_passage_prompts=2, long_seq_len=96)
  both = build_corpus(peaked_target, config, layer_ids=(1,), cache_dir=str(tmp_path))
  assert answered == [(prompts, 96)]
  np.testing.assert_array_equal(both.tokens, plain.tokens)
  np.testing.assert_array_equal(np.asarray(both.layers), np.asarray(plain.layers))
  long = both.long
  assert long.tokens.shape == (2, 96) and long.on_policy.all() and long.long is None
  assert np.asarray(long.layers).shape[:2] == (2, 96) and long.layer_ids == (1,)
  assert long.mask.sum(axis=1).min() > tiny_corpus_config.seq_len // 2  # the prompt and answer kept whole
  answered.clear()
  again = build_corpus(peaked_target, config, layer_ids=(1,), cache_dir=str(tmp_path))
  assert answered == []
  np.testing.assert_array_equal(again.long.tokens, long.tokens)
  same_length = build_corpus(peaked_target, dataclasses.replace(config, long_seq_len=tiny_corpus_config.seq_len),
                             layer_ids=(1,), cache_dir=str(tmp_path))
  assert same_length.long is None and int(same_length.on_policy.sum()) == tiny_corpus_config.n_prompts + 2
  with pytest.raises(ValueError, match="long_seq_len \\(32\\) must be at least seq_len \\(48\\)"):
    dataclasses.replace(config, long_seq_len=32)
  with pytest.raises(ValueError, match="long_passage_prompts must be >= 0"):
    dataclasses.replace(config, long_passage_prompts=-1)


def test_fields_added_later_key_caches_and_runs_only_when_set(tiny_corpus_config):
  """`described`: the corpus cache key and a training run's description leave out a later field at its default, so
  caches and checkpoints made before it existed stay valid; set, it is kept."""
  fields = dataclasses.asdict(tiny_corpus_config)
  plain = corpus_module.described(fields)
  assert not set(corpus_module.LATER_FIELDS) & set(plain)
  assert {k: v for k, v in fields.items() if k not in corpus_module.LATER_FIELDS} == plain
  set_ = corpus_module.described(dict(fields, long_passage_prompts=8, feature_gemm="bfloat16"))
  assert set_ == dict(plain, long_passage_prompts=8, feature_gemm="bfloat16")
