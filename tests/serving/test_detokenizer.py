"""TextStream: incremental text of a byte-level BPE token stream, held back inside a UTF-8 character and at a
possible stop string."""

from specjax.serving.detokenizer import TextStream


def _pieces(stream, ids):
  return [stream.push(t) for t in ids]


def test_text_is_released_whole_characters_at_a_time(tiny_tokenizer):
  ids = tiny_tokenizer.encode("hello é!")
  stream = TextStream(tiny_tokenizer)
  pieces = _pieces(stream, ids) + [stream.flush()]
  assert "".join(pieces) == "hello é!" == tiny_tokenizer.decode(ids)
  assert "" in pieces and not any("\ufffd" in p for p in pieces)   # the first byte of é waited for the second


def test_a_stop_string_cuts_the_text_and_is_never_shown(tiny_tokenizer):
  ids = tiny_tokenizer.encode("say hello world and more")
  stream = TextStream(tiny_tokenizer, stop=["o w", "zz"])
  shown = ""
  for t in ids:
    shown += stream.push(t)
    assert "o w" not in shown
    if stream.stopped:
      break
  assert stream.stopped and shown == "say hell" and stream.push(ids[-1]) == ""


def test_without_a_tokenizer_ids_are_written_out():
  stream = TextStream(None)
  assert _pieces(stream, [5, 17]) == [" 5", " 17"] and stream.flush() == ""
