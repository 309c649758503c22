"""Text of a token stream, piece by piece: what each new token adds to the text (held back while it ends in an
incomplete UTF-8 sequence, or while it may be the start of a stop string), and where a stop string ends it.

Decoding a window of the last tokens (the offsets of Hugging Face's and vLLM's incremental detokenizers) keeps each
step's work constant: a byte-level BPE piece may only be readable with the tokens before it."""

from typing import Sequence

_INCOMPLETE = "\ufffd"   # what a decoder gives for bytes that do not yet form a character


class TextStream:
  """Feed token ids one at a time with `push`; it returns the new text that is safe to show. Without a tokenizer, the
  text is the ids written in decimal, one space before each. `stop`: strings that end the text (not included)."""

  def __init__(self, tokenizer, stop: Sequence[str] = (), skip_special_tokens: bool = True):
    self.tokenizer, self.stop = tokenizer, tuple(s for s in stop if s)
    self.skip_special_tokens = skip_special_tokens
    self.ids: list[int] = []
    self.text = ""             # everything decoded so far (stop string cut away once found)
    self.sent = 0              # characters of `text` already returned
    self.stopped = False
    self._prefix, self._read = 0, 0

  def _decode(self, ids) -> str:
    return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

  def _append(self, token: int) -> None:
    self.ids.append(int(token))
    if self.tokenizer is None:
      self.text += f" {int(token)}"
      return
    before = self._decode(self.ids[self._prefix:self._read])
    after = self._decode(self.ids[self._prefix:])
    if len(after) > len(before) and not after.endswith(_INCOMPLETE):
      self.text += after[len(before):]
      self._prefix, self._read = self._read, len(self.ids)

  def push(self, token: int) -> str:
    """Adds one token; returns the text it releases ("" while held back). After a stop string, nothing more."""
    if self.stopped:
      return ""
    self._append(token)
    if self.stop:
      search_from = max(0, self.sent - max(len(s) for s in self.stop))
      hits = [i for i in (self.text.find(s, search_from) for s in self.stop) if i >= 0]
      if hits:
        self.text, self.stopped = self.text[:min(hits)], True
        return self._release(len(self.text))
      # keep back a tail that could still grow into a stop string
      hold = max((n for s in self.stop for n in range(1, len(s)) if self.text.endswith(s[:n])), default=0)
      return self._release(len(self.text) - hold)
    return self._release(len(self.text))

  def _release(self, upto: int) -> str:
    upto = max(upto, self.sent)
    piece, self.sent = self.text[self.sent:upto], upto
    return piece

  def flush(self) -> str:
    """The rest at the end of the stream (a held-back tail; undecodable bytes as the decoder renders them)."""
    if not self.stopped and self.tokenizer is not None and self._read < len(self.ids):
      before = self._decode(self.ids[self._prefix:self._read])
      self.text += self._decode(self.ids[self._prefix:])[len(before):]
      self._read = len(self.ids)
    return self._release(len(self.text))
