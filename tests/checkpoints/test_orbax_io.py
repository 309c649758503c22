"""specjax Orbax checkpoints: exact round trip, dtype on restore, atomic writes, refusal of half-written ones."""

import os

import numpy as np
import pytest

from specjax.checkpoints import load_model, save_model
from specjax.checkpoints import orbax_io
from specjax.config import ModelConfig
from specjax.model import init_model

CONFIG = ModelConfig(vocab_size=263, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, max_seq_len=128,
                     tie_embeddings=False, qkv_bias=True, eos_token_ids=(2,), bos_token_id=1)
IDS = [1, 40, 77, 120, 5, 260, 33, 90]


@pytest.fixture
def model(tiny_tokenizer):
  return init_model(CONFIG, seed=3).with_tokenizer(tiny_tokenizer)


def test_round_trip_is_exact(model, tmp_path, specjax_last_logits):
  path = save_model(model, tmp_path / "ckpt")
  assert os.path.isfile(os.path.join(path, orbax_io.MARKER))
  loaded = load_model(path)
  assert loaded.config == model.config
  for name, value in model.flat_params().items():
    np.testing.assert_array_equal(np.asarray(loaded.flat_params()[name]), np.asarray(value), err_msg=name)
  np.testing.assert_array_equal(specjax_last_logits(loaded, [IDS]), specjax_last_logits(model, [IDS]))
  assert loaded.tokenizer.encode("hello <|im_end|>") == model.tokenizer.encode("hello <|im_end|>")
  assert loaded.tokenizer.apply_chat_template("hi") == model.tokenizer.apply_chat_template("hi")
  assert (loaded.tokenizer.eos_token_ids, loaded.tokenizer.bos_token_id) == ((2,), 1)


def test_restore_in_target_dtype(model, tmp_path, specjax_last_logits):
  path = save_model(model, tmp_path / "ckpt")
  loaded = load_model(path, dtype="bfloat16")
  assert loaded.config.dtype == "bfloat16"
  assert all(str(x.dtype) == "bfloat16" for x in loaded.flat_params().values())
  np.testing.assert_allclose(specjax_last_logits(loaded, [IDS]), specjax_last_logits(model, [IDS]), atol=0.1)


def test_refuses_to_overwrite_unless_asked(model, tmp_path):
  path = save_model(model, tmp_path / "ckpt")
  with pytest.raises(FileExistsError, match="overwrite=True"):
    save_model(model, path)
  other = init_model(CONFIG, seed=4)
  save_model(other, path, overwrite=True)
  np.testing.assert_array_equal(np.asarray(load_model(path).flat_params()["embed"]),
                                np.asarray(other.flat_params()["embed"]))
  assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # no partial or old directories left behind


def test_interrupted_save_leaves_no_target_and_is_refused(model, tmp_path, monkeypatch):
  target = tmp_path / "ckpt"

  def crash(*args, **kwargs):
    raise KeyboardInterrupt  # like a kill between writing the files and finishing

  monkeypatch.setattr(orbax_io, "_finalize", crash)
  with pytest.raises(KeyboardInterrupt):
    save_model(model, target)
  assert not target.exists()
  leftovers = [tmp_path / name for name in os.listdir(tmp_path)]
  assert len(leftovers) == 1 and leftovers[0].name.startswith(".ckpt")
  with pytest.raises(ValueError, match="incomplete"):
    load_model(leftovers[0])
  with pytest.raises(FileNotFoundError, match=str(target)):
    load_model(target)

  monkeypatch.undo()  # the next save succeeds and clears the leftover
  save_model(model, target)
  assert sorted(os.listdir(tmp_path)) == ["ckpt"]


def test_failed_save_cleans_up(model, tmp_path, monkeypatch):
  def fail(*args, **kwargs):
    raise OSError("disk full")

  monkeypatch.setattr(orbax_io, "_finalize", fail)
  with pytest.raises(OSError, match="disk full"):
    save_model(model, tmp_path / "ckpt")
  assert os.listdir(tmp_path) == []


def test_directory_without_marker_is_refused(model, tmp_path):
  path = save_model(model, tmp_path / "ckpt")
  os.remove(os.path.join(path, orbax_io.MARKER))
  with pytest.raises(ValueError, match=f"incomplete.*{orbax_io.MARKER}"):
    load_model(path)
