"""The memory-mapped feature store (specjax.training.feature_store): shards read back as the in-memory pass, a pass
that stops resumes after its last whole shard, rows another store holds are copied, and the corpus cache reuses and
merges stores."""

import dataclasses
import glob
import os

import numpy as np
import pytest

from specjax.training import data as data_module
from specjax.training.data import build_corpus
from specjax.training.feature_store import Donor, RowShards, forward_rows, open_store, stores_of, write_store


def _forward(tokens_BxT):
  """A deterministic stand-in for the target: features that name their token and position."""
  t = tokens_BxT.astype(np.float16)
  hidden = np.stack([t, t * 0 + np.arange(t.shape[1])], axis=-1)
  return hidden, np.stack([hidden, -hidden], axis=2)


def _tokens(n=23, t=5, seed=0):
  return np.random.default_rng(seed).integers(0, 60, (n, t), dtype=np.int32)


def test_shards_read_back_as_the_pass_in_memory(tmp_path):
  tokens = _tokens()
  write_store(str(tmp_path), tokens, (1, 4), _forward, shard_rows=7, batch_size=3)
  layout, hidden, layers = open_store(str(tmp_path))
  assert (layout.rows, layout.n_shards, layout.layer_ids) == (23, 4, (1, 4))
  want_hidden, want_layers = forward_rows(_forward, tokens, batch_size=4)
  rows = np.array([22, 0, 7, 6, 13, 14, 6, -1])
  np.testing.assert_array_equal(hidden[rows], want_hidden[rows])
  np.testing.assert_array_equal(layers[rows][:, :, [1]], want_layers[rows][:, :, [1]])
  np.testing.assert_array_equal(hidden[5:16], want_hidden[5:16])
  np.testing.assert_array_equal(np.asarray(layers), want_layers)
  assert isinstance(hidden.shards[0], np.memmap)
  with pytest.raises(IndexError, match="out of range"):
    hidden[np.array([23])]


def test_a_stopped_pass_resumes_after_its_last_whole_shard(tmp_path):
  tokens = _tokens()
  seen = []

  def dies_in_the_third_shard(tokens_BxT):
    seen.append(len(tokens_BxT))
    if len(seen) > 6:  # shards 0 and 1 take three batches each
      raise KeyboardInterrupt
    return _forward(tokens_BxT)

  with pytest.raises(KeyboardInterrupt):
    write_store(str(tmp_path), tokens, (1, 4), dies_in_the_third_shard, shard_rows=7, batch_size=3)
  assert open_store(str(tmp_path)) is None
  rows_done = []

  def counting(tokens_BxT):
    rows_done.append(tokens_BxT[:, 0].copy())
    return _forward(tokens_BxT)

  write_store(str(tmp_path), tokens, (1, 4), counting, shard_rows=99, batch_size=3)
  firsts = np.concatenate(rows_done)  # shards 2 and 3 only, each padded to whole batches of 3
  assert firsts[:7].tolist() == tokens[14:21, 0].tolist() and firsts[9:11].tolist() == tokens[21:, 0].tolist()
  assert len(firsts) == 12
  _, hidden, layers = open_store(str(tmp_path))
  whole = tmp_path / "whole"
  write_store(str(whole), tokens, (1, 4), _forward, shard_rows=7, batch_size=3)
  _, want_hidden, want_layers = open_store(str(whole))
  np.testing.assert_array_equal(np.asarray(hidden), np.asarray(want_hidden))
  np.testing.assert_array_equal(np.asarray(layers), np.asarray(want_layers))


def test_a_store_of_other_rows_is_not_resumed(tmp_path):
  write_store(str(tmp_path), _tokens(), (1, 4), _forward, shard_rows=7)
  with pytest.raises(ValueError, match="holds features of"):
    write_store(str(tmp_path), _tokens(n=24), (1, 4), _forward, shard_rows=7)
  with pytest.raises(ValueError, match="holds features of"):
    write_store(str(tmp_path), _tokens(), (1, 2), _forward, shard_rows=7)


def test_row_shards_take_only_1d_rows():
  shards = RowShards([np.zeros((2, 3)), np.ones((3, 3))])
  assert shards.shape == (5, 3) and shards[np.array([1, 2])].tolist() == [[0] * 3, [1] * 3]
  with pytest.raises(IndexError, match="1-D"):
    shards[np.zeros((2, 2), int)]


def test_the_corpus_cache_reuses_and_merges_stores(peaked_target, tiny_corpus_config, tmp_path, monkeypatch):
  first = build_corpus(peaked_target, tiny_corpus_config, layer_ids=(1,), cache_dir=str(tmp_path))
  assert first.layer_ids == (1,) and isinstance(first.hidden, RowShards)
  in_memory = build_corpus(peaked_target, tiny_corpus_config, layer_ids=(1, 2))
  merged = build_corpus(peaked_target, tiny_corpus_config, layer_ids=(2,), cache_dir=str(tmp_path))
  assert merged.layer_ids == (1, 2)
  [store] = [d.rsplit("-layers-", 1)[1] for d in stores_of(str(tmp_path), "*")]
  assert store == "1-2"
  rows = np.arange(len(first.tokens))
  for layer_ids in [(1,), (2,), (1, 2)]:
    got, want = merged.batch(rows, layer_ids), in_memory.batch(rows, layer_ids)
    for name in want:
      np.testing.assert_allclose(np.asarray(got[name], np.float32), np.asarray(want[name], np.float32), atol=2e-3)

  def not_again(*args, **kwargs):
    raise AssertionError("the target pass ran again")

  monkeypatch.setattr(data_module, "_target_forward", not_again)
  again = build_corpus(peaked_target, tiny_corpus_config, layer_ids=(1,), cache_dir=str(tmp_path))
  np.testing.assert_array_equal(np.asarray(again.layers), np.asarray(merged.layers))


def test_rows_another_store_holds_are_copied_not_computed(tmp_path):
  old, new = _tokens(n=20), _tokens(n=30, seed=1)
  new[[3, 11, 29]] = old[[19, 0, 7]]
  new[12] = old[0]
  write_store(str(tmp_path / "old"), old, (1, 4, 6), _forward, shard_rows=8, target="t")
  donor = Donor(old, *open_store(str(tmp_path / "old")))
  computed = []

  def counting(tokens_BxT):
    computed.append(tokens_BxT.copy())
    return _forward(tokens_BxT)

  write_store(str(tmp_path / "new"), new, (1, 4), counting, shard_rows=7, batch_size=4, target="t", donors=[donor])
  real_rows = [row for batch in computed for row in batch if row.any()]
  assert len(real_rows) == 26 and not any((row == old[[0, 7, 19]]).all(1).any() for row in real_rows)
  _, hidden, layers = open_store(str(tmp_path / "new"))
  want_hidden, want_layers = forward_rows(_forward, new, batch_size=4)
  np.testing.assert_array_equal(np.asarray(hidden), want_hidden)
  np.testing.assert_array_equal(np.asarray(layers), want_layers[:, :, :2])
  for target, layer_ids in [("other", (1, 4)), ("t", (1, 5))]:
    with pytest.raises(ValueError, match="cannot give rows"):
      write_store(str(tmp_path / target / str(layer_ids[1])), new, layer_ids, _forward, target=target, donors=[donor])
  unnamed = dataclasses.replace(donor, layout=dataclasses.replace(donor.layout, target=""))
  with pytest.raises(ValueError, match="cannot give rows"):
    write_store(str(tmp_path / "unnamed"), new, (1, 4), _forward, donors=[unnamed])


def test_a_corpus_with_more_rows_computes_only_the_new_ones(peaked_target, tiny_corpus_config, tmp_path, monkeypatch):
  build_corpus(peaked_target, tiny_corpus_config, layer_ids=(1, 2), cache_dir=str(tmp_path))
  computed = []
  forward = data_module._target_forward

  def counting(target, tokens_BxT, layer_ids, *precision):
    computed.append(np.asarray(tokens_BxT))
    return forward(target, tokens_BxT, layer_ids, *precision)

  monkeypatch.setattr(data_module, "_target_forward", counting)
  more = dataclasses.replace(tiny_corpus_config, stdlib_sequences=tiny_corpus_config.stdlib_sequences + 4)
  grown = build_corpus(peaked_target, more, layer_ids=(2,), cache_dir=str(tmp_path))
  assert grown.layer_ids == (2,) and len(stores_of(str(tmp_path), "*")) == 2
  assert 0 < sum(len(t) for t in computed) <= 8   # the four new rows, in one batch of 8 padded
  want = build_corpus(peaked_target, more, layer_ids=(2,))
  rows = np.arange(len(want.tokens))
  got, want = grown.batch(rows, (2,)), want.batch(rows, (2,))
  for name in want:
    np.testing.assert_allclose(np.asarray(got[name], np.float32), np.asarray(want[name], np.float32), atol=2e-3)


def test_a_partial_store_of_other_layers_is_merged_not_left_behind(peaked_target, tiny_corpus_config, tmp_path):
  build_corpus(peaked_target, tiny_corpus_config, layer_ids=(1,), cache_dir=str(tmp_path))
  [partial] = stores_of(str(tmp_path), "*")
  last = sorted(glob.glob(f"{partial}/hidden-*.npy"))[-1]
  os.remove(last)
  assert open_store(partial) is None
  merged = build_corpus(peaked_target, tiny_corpus_config, layer_ids=(2,), cache_dir=str(tmp_path))
  assert merged.layer_ids == (1, 2) and [d.rsplit("-layers-", 1)[1] for d in stores_of(str(tmp_path), "*")] == ["1-2"]
