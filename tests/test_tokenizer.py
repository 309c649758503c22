"""Tokenizer: SmolLM2's, rebuilt from GGUF metadata, against HF transformers' tokenizer for the same file."""

import glob
import os

import pytest
import tokenizers
from tokenizers import pre_tokenizers

from specjax.tokenizer import Tokenizer

STRINGS = [
    "Hello world",
    "The year 2024 had 366 days; pi is 3.14159 and 1,000,000 > 999.",
    "héllo wörld — ñandú, Zürich, 東京, 한국어, Привет, مرحبا",
    "emoji 😀👍🏽 family 👨‍👩‍👧",
    "def f(x):\n    return x**2 + 1  # comment\n\n\nclass A:\n\tpass\n",
    "  leading spaces, trailing spaces   \n\n\r\n",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "JSON: {\"a\": [1, 2, 3], \"b\": null}",
    "",
]
CHATS = [
    "What is 2+2?",
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."},
     {"role": "assistant", "content": "Blue."}, {"role": "user", "content": "Another, in 日本語?"}],
]


@pytest.fixture(scope="module")
def tokenizer(smollm2_model):
  return smollm2_model.tokenizer


@pytest.fixture(scope="module")
def reference(hf_smollm2_tokenizer):
  """HF's tokenizer for the GGUF with the pre-tokenizer of SmolLM2's own tokenizer.json and of llama.cpp's
  `smollm` rule: each digit split off before GPT-2's regex. (HF's GGUF reader has no `smollm` rule and falls
  back to GPT-2's regex, which differs only where whitespace runs precede a digit.)"""
  backend = tokenizers.Tokenizer.from_str(hf_smollm2_tokenizer.backend_tokenizer.to_str())
  backend.pre_tokenizer = pre_tokenizers.Sequence(
      [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
  return backend


def test_properties(tokenizer):
  assert tokenizer.vocab_size == 49152
  assert tokenizer.eos_token_ids == (2,) and tokenizer.bos_token_id == 1
  assert tokenizer.add_bos is False


@pytest.mark.parametrize("text", STRINGS)
def test_encode_decode_match_transformers(tokenizer, hf_smollm2_tokenizer, text):
  ids = tokenizer.encode(text)
  assert ids == hf_smollm2_tokenizer.encode(text, add_special_tokens=False)
  assert tokenizer.decode(ids) == hf_smollm2_tokenizer.decode(ids) == text


def test_digits_follow_smollm2_pretokenizer(tokenizer, hf_smollm2_tokenizer, reference):
  text = "x = [\n        0,\n        1]"
  ids = tokenizer.encode(text)
  assert [tokenizer.decode([i]) for i in ids][2:5] == [" [", "\n        ", "0"]
  assert ids != hf_smollm2_tokenizer.encode(text, add_special_tokens=False)  # HF's GGUF reader splits " " off
  for text in ["x = [\n        0,\n        1]", "½ x² ٣ ½", "   42  7"]:
    assert tokenizer.encode(text) == reference.encode(text, add_special_tokens=False).ids, text


def test_source_code_corpus_matches_reference(tokenizer, reference):
  files = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))[:25]
  for path in files:
    with open(path, encoding="utf-8", errors="replace") as f:
      text = f.read()
    ids = tokenizer.encode(text)
    assert ids == reference.encode(text, add_special_tokens=False).ids, path
    assert tokenizer.decode(ids) == text, path


@pytest.mark.parametrize("chat", CHATS, ids=["string", "one-turn", "multi-turn"])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_matches_transformers(tokenizer, hf_smollm2_tokenizer, chat, add_generation_prompt):
  messages = [{"role": "user", "content": chat}] if isinstance(chat, str) else chat
  text = hf_smollm2_tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                                  tokenize=False)
  assert tokenizer.render_chat(chat, add_generation_prompt) == text
  ids = tokenizer.apply_chat_template(chat, add_generation_prompt=add_generation_prompt)
  assert ids == hf_smollm2_tokenizer.encode(text, add_special_tokens=False)
  assert ids[0] == 1  # <|im_start|> is one control token


def test_save_and_load_round_trip(tokenizer, tmp_path):
  tokenizer.save(tmp_path)
  loaded = Tokenizer.load(tmp_path)
  assert (loaded.eos_token_ids, loaded.bos_token_id, loaded.add_bos, loaded.vocab_size) == ((2,), 1, False, 49152)
  for text in STRINGS + ["x = [\n        0]"]:
    assert loaded.encode(text) == tokenizer.encode(text)
  assert loaded.apply_chat_template(CHATS[2]) == tokenizer.apply_chat_template(CHATS[2])


def test_load_transformers_saved_directory(hf_smollm2_tokenizer, tmp_path):
  hf_smollm2_tokenizer.save_pretrained(tmp_path)
  loaded = Tokenizer.load(tmp_path)
  assert (loaded.eos_token_ids, loaded.bos_token_id, loaded.add_bos) == ((2,), 1, False)
  for text in STRINGS:
    assert loaded.encode(text) == hf_smollm2_tokenizer.encode(text, add_special_tokens=False)
  assert loaded.render_chat(CHATS[2]) == hf_smollm2_tokenizer.apply_chat_template(
      CHATS[2], add_generation_prompt=True, tokenize=False)


def test_add_bos_prepends_bos(tiny_tokenizer):
  tok = Tokenizer(tiny_tokenizer.backend, bos_token_id=1, eos_token_ids=(2,), add_bos=True)
  assert tok.encode("hello") == [1, *tiny_tokenizer.encode("hello")]
  assert tiny_tokenizer.encode("hello") == [tiny_tokenizer.backend.token_to_id("hello")]


def test_missing_chat_template_is_an_error(tiny_tokenizer):
  tok = Tokenizer(tiny_tokenizer.backend)
  with pytest.raises(ValueError, match="no chat template"):
    tok.apply_chat_template("hi")


def test_template_runs_sandboxed(tiny_tokenizer):
  tok = Tokenizer(tiny_tokenizer.backend, chat_template="{{ messages.__class__.__mro__ }}")
  with pytest.raises(Exception, match="unsafe|__class__|attribute"):
    tok.render_chat("hi")
