"""`Tokenizer`: a `tokenizers.Tokenizer` plus special token ids and the model's Jinja chat template.

Built from a `tokenizer.json` directory (Hugging Face layout, also what `Tokenizer.save` writes) or from a
GGUF file's `tokenizer.ggml.*` metadata (byte-level BPE, rebuilt the way HF transformers' GGUF loader does).
"""

import datetime
import json
import os
import warnings
from typing import Any, Mapping, Sequence

import jinja2
import jinja2.ext
import jinja2.sandbox
import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"

# GGUF token types (llama.cpp's llama_token_type).
_CONTROL, _USER_DEFINED = 3, 4

_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# `tokenizer.ggml.pre` -> regex that splits text before BPE. None: GPT-2's regex (inside ByteLevel).
# "digits": each digit on its own, then GPT-2's regex (llama.cpp's rule for these, and SmolLM2's tokenizer.json).
_GGUF_SPLITS = {
    "default": None, "gpt-2": None, "gpt2": None,
    "smollm": "digits", "starcoder": "digits", "refact": "digits", "command-r": "digits",
    "codeshell": "digits", "exaone": "digits", "minerva-7b": "digits",
    "llama3": _LLAMA3_SPLIT, "llama-v3": _LLAMA3_SPLIT, "llama-bpe": _LLAMA3_SPLIT, "smaug-bpe": _LLAMA3_SPLIT,
    "dbrx": _LLAMA3_SPLIT, "falcon3": _LLAMA3_SPLIT, "pixtral": _LLAMA3_SPLIT,
    "qwen2": _QWEN2_SPLIT, "deepseek-r1-qwen": _QWEN2_SPLIT, "megrez": _QWEN2_SPLIT,
}


def _byte_pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
  split = _GGUF_SPLITS.get(pre)
  if pre not in _GGUF_SPLITS:
    warnings.warn(f"GGUF pre-tokenizer {pre!r} is not known to specjax; splitting text with GPT-2's regex")
  if split is None:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  if split == "digits":
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
  return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def _gguf_backend(metadata: Mapping[str, Any]) -> tokenizers.Tokenizer:
  """Byte-level BPE from `tokenizer.ggml.{tokens,merges,token_type,pre}`; control tokens become special."""
  kind = metadata.get("tokenizer.ggml.model")
  if kind != "gpt2":
    raise ValueError(f"GGUF tokenizer model {kind!r} is not supported (only byte-level BPE, 'gpt2')")
  tokens = list(metadata["tokenizer.ggml.tokens"])
  if "tokenizer.ggml.merges" not in metadata:
    raise ValueError("GGUF byte-level BPE tokenizer has no tokenizer.ggml.merges")
  alphabet = set(pre_tokenizers.ByteLevel.alphabet())
  byte_chars = _bytes_to_unicode()
  # A token outside the byte alphabet (a mislabelled raw string) is re-spelled in it, as HF does.
  vocab = {(t if set(t) <= alphabet else "".join(byte_chars[b] for b in t.encode("utf-8"))): i
           for i, t in enumerate(tokens)}
  merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]]
  backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
  backend.pre_tokenizer = _byte_pre_tokenizer(str(metadata.get("tokenizer.ggml.pre", "default")))
  backend.decoder = decoders.ByteLevel()
  types = list(metadata.get("tokenizer.ggml.token_type", ()))
  special = [AddedToken(t, special=True, normalized=False)
             for t, kind in zip(tokens, types) if kind == _CONTROL and set(t) <= alphabet]
  user = [AddedToken(t, special=False, normalized=False)
          for t, kind in zip(tokens, types) if kind == _USER_DEFINED and t in vocab]
  backend.add_special_tokens(special)
  backend.add_tokens(user)
  return backend


def _bytes_to_unicode() -> dict[int, str]:
  """GPT-2's reversible byte -> printable character table."""
  keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
  chars, extra = {}, 0
  for b in range(256):
    if b in keep:
      chars[b] = chr(b)
    else:
      chars[b] = chr(256 + extra)
      extra += 1
  return chars


def _template_env() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
  """The sandbox HF transformers renders chat templates in (same options, filters and globals)."""

  def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

  def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

  env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                     extensions=[jinja2.ext.loopcontrols])
  env.filters["tojson"] = tojson
  env.globals["raise_exception"] = raise_exception
  env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
  return env


def _token_text(value) -> str | None:
  """tokenizer_config.json writes special tokens as a string or as an AddedToken dict."""
  if isinstance(value, dict):
    return value.get("content")
  return value


class Tokenizer:
  """Text <-> ids for one model; `encode` adds BOS only when the model asks for it (`add_bos`)."""

  def __init__(self, backend: tokenizers.Tokenizer, *, chat_template: str | None = None, bos_token_id: int = -1,
               eos_token_ids: Sequence[int] = (), add_bos: bool = False, special_tokens: Mapping[str, str] = None):
    self.backend = backend
    self.chat_template = chat_template
    self._bos_token_id = int(bos_token_id)
    self._eos_token_ids = tuple(int(t) for t in eos_token_ids)
    self.add_bos = bool(add_bos) and self._bos_token_id >= 0
    names = dict(special_tokens or {})
    for name, ids in (("bos_token", [self._bos_token_id]), ("eos_token", self._eos_token_ids)):
      if name not in names and ids and ids[0] >= 0:
        names[name] = backend.id_to_token(ids[0])
    self.special_tokens = {k: v for k, v in names.items() if v is not None}
    self._template = None

  # ---- construction -------------------------------------------------------------------------------------------

  @classmethod
  def from_gguf_metadata(cls, metadata: Mapping[str, Any]) -> "Tokenizer":
    """From a GGUF file's metadata (as read by `specjax.checkpoints.gguf.read_metadata`)."""
    backend = _gguf_backend(metadata)
    tokens = metadata["tokenizer.ggml.tokens"]
    keys = ("bos", "eos", "eot", "eom", "unknown", "padding")
    ids = {key: metadata.get(f"tokenizer.ggml.{key}_token_id") for key in keys}
    eos = [ids[k] for k in ("eos", "eot", "eom") if ids[k] is not None]
    special = {name: tokens[ids[key]] for name, key in (("unk_token", "unknown"), ("pad_token", "padding"))
               if ids[key] is not None and ids[key] < len(tokens)}
    return cls(backend, chat_template=metadata.get("tokenizer.chat_template"),
               bos_token_id=-1 if ids["bos"] is None else ids["bos"], eos_token_ids=list(dict.fromkeys(eos)),
               add_bos=bool(metadata.get("tokenizer.ggml.add_bos_token", False)), special_tokens=special)

  @classmethod
  def load(cls, directory: str | os.PathLike) -> "Tokenizer":
    """From `tokenizer.json` (+ optional `tokenizer_config.json`, `chat_template.jinja`) in `directory`."""
    directory = os.fspath(directory)
    path = os.path.join(directory, TOKENIZER_FILE)
    if not os.path.isfile(path):
      raise FileNotFoundError(f"no {TOKENIZER_FILE} in {directory}")
    try:
      backend = tokenizers.Tokenizer.from_file(path)
    except Exception as err:
      raise ValueError(f"{path} is not a valid tokenizers file: {err}") from err
    config = {}
    config_path = os.path.join(directory, CONFIG_FILE)
    if os.path.isfile(config_path):
      with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    template = config.get("chat_template")
    if isinstance(template, list):  # a list of named templates: take the default one
      template = next((t["template"] for t in template if t.get("name") == "default"), None)
    template_path = os.path.join(directory, TEMPLATE_FILE)
    if os.path.isfile(template_path):
      with open(template_path, encoding="utf-8") as f:
        template = f.read()
    special = {name: _token_text(config.get(name)) for name in ("bos_token", "eos_token", "unk_token", "pad_token")}
    special = {k: v for k, v in special.items() if v is not None}

    def token_id(text):
      return -1 if text is None or backend.token_to_id(text) is None else backend.token_to_id(text)

    bos = config.get("specjax_bos_token_id", token_id(special.get("bos_token")))
    eos = config.get("specjax_eos_token_ids")
    if eos is None:
      eos = [token_id(special.get("eos_token"))] if token_id(special.get("eos_token")) >= 0 else []
    add_bos = config.get("add_bos_token")
    if add_bos is None:  # tokenizer.json may add it in its post-processor (Llama 3): ask it
      add_bos = bos >= 0 and backend.encode("", add_special_tokens=True).ids[:1] == [bos]
    return cls(backend, chat_template=template, bos_token_id=bos, eos_token_ids=eos, add_bos=add_bos,
               special_tokens=special)

  def save(self, directory: str | os.PathLike) -> None:
    """Writes `tokenizer.json` and `tokenizer_config.json` (special tokens, ids, chat template)."""
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    self.backend.save(os.path.join(directory, TOKENIZER_FILE))
    config = dict(self.special_tokens, add_bos_token=self.add_bos, chat_template=self.chat_template,
                  specjax_bos_token_id=self._bos_token_id, specjax_eos_token_ids=list(self._eos_token_ids))
    with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as f:
      json.dump(config, f, ensure_ascii=False, indent=1)

  # ---- use ----------------------------------------------------------------------------------------------------

  @property
  def eos_token_ids(self) -> tuple[int, ...]:
    return self._eos_token_ids

  @property
  def bos_token_id(self) -> int:
    """-1 when the model has none."""
    return self._bos_token_id

  @property
  def vocab_size(self) -> int:
    return self.backend.get_vocab_size(with_added_tokens=True)

  def encode(self, text: str) -> list[int]:
    """Token ids of `text`; special-token text (e.g. `<|im_start|>`) maps to its id; BOS only if `add_bos`."""
    ids = self.backend.encode(text, add_special_tokens=False).ids
    return [self._bos_token_id, *ids] if self.add_bos else ids

  def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
    return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

  def render_chat(self, messages_or_text, add_generation_prompt: bool = True, **template_kwargs) -> str:
    """The chat template applied to a message list (or one user message given as a string), as text."""
    if not self.chat_template:
      raise ValueError("this tokenizer has no chat template")
    if isinstance(messages_or_text, str):
      messages = [{"role": "user", "content": messages_or_text}]
    else:
      messages = [dict(m) for m in messages_or_text]
    if self._template is None:
      self._template = _template_env().from_string(self.chat_template)
    values = {"tools": None, "documents": None, **self.special_tokens, **template_kwargs}
    return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt, **values)

  def apply_chat_template(self, messages_or_text, add_generation_prompt: bool = True, **template_kwargs) -> list[int]:
    """Token ids of the rendered chat (the template writes any BOS itself, so none is added)."""
    text = self.render_chat(messages_or_text, add_generation_prompt, **template_kwargs)
    return self.backend.encode(text, add_special_tokens=False).ids

  def __repr__(self) -> str:
    return (f"Tokenizer(vocab_size={self.vocab_size}, bos={self._bos_token_id}, eos={self._eos_token_ids}, "
            f"add_bos={self.add_bos}, chat_template={'yes' if self.chat_template else 'no'})")
