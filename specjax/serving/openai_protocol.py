"""The OpenAI API's request and response shapes for `/v1/completions` and `/v1/chat/completions`, without an HTTP
stack: a JSON body in, a validated `Request` plus response options out (or an `ApiError` naming the problem), and the
JSON objects of responses and stream chunks.

Supported: one prompt (text or token ids) or one chat, `max_tokens` (`max_completion_tokens` for chat; default: the
rest of the context), `temperature`, `top_p`, `top_k` (vLLM's extension; -1 or 0 = off), `seed`, `stop`, `stream`,
`stream_options.include_usage`, and vLLM's `ignore_eos` and `return_token_ids`. Refused with a 400: `n` > 1,
`best_of` > 1, `logprobs`, `echo`, `suffix`, penalties other than 0, several prompts. Every response carries the
request's speculation statistics in a top-level `spec_decode` object (and in the last stream chunk)."""

import dataclasses
import math
import time
import uuid

import numpy as np

from specjax.sampling import SamplingParams
from specjax.serving.request import Request, RequestStats


class ApiError(Exception):
  """An error response: HTTP status, a message naming the problem, the offending parameter and OpenAI's type."""

  def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
    super().__init__(message)
    self.status, self.message, self.param, self.kind = status, message, param, kind

  def body(self) -> dict:
    return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}


@dataclasses.dataclass(frozen=True)
class Parsed:
  """A validated body: the engine's request and how to answer."""

  request: Request
  chat: bool
  stream: bool
  include_usage: bool
  stop: tuple[str, ...]
  return_token_ids: bool


def _bad(message: str, param: str | None = None) -> ApiError:
  return ApiError(400, message, param)


def _is_int(value) -> bool:
  return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _number(body: dict, name: str, default: float) -> float:
  value = body.get(name)
  if value is None:
    return default
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
    raise _bad(f"{name} must be a finite number, got {value!r}", name)
  return float(value)


def _flag(body: dict, name: str) -> bool:
  value = body.get(name, False)
  if value is None:
    return False
  if not isinstance(value, bool):
    raise _bad(f"{name} must be true or false, got {value!r}", name)
  return value


def sampling_of(body: dict) -> SamplingParams:
  """temperature (default 1; 0 = greedy), top_p in (0, 1], top_k (0 or -1 = off)."""
  temperature = _number(body, "temperature", 1.0)
  if temperature < 0:
    raise _bad(f"temperature must be >= 0, got {temperature}", "temperature")
  top_p = _number(body, "top_p", 1.0)
  if not 0 < top_p <= 1:
    raise _bad(f"top_p must be in (0, 1], got {top_p}", "top_p")
  top_k = body.get("top_k")
  if top_k is None or top_k == -1:
    top_k = 0
  if not _is_int(top_k) or top_k < 0:
    raise _bad(f"top_k must be an int >= 0 (0 or -1: off), got {body.get('top_k')!r}", "top_k")
  if temperature == 0:
    return SamplingParams(0.0)   # greedy ignores top-k and top-p: one setting, one compiled program
  return SamplingParams(temperature, int(top_k), top_p)


def _refuse_unsupported(body: dict, chat: bool) -> None:
  for name in ("n", "best_of"):
    if body.get(name) not in (None, 1):
      raise _bad(f"{name}={body[name]!r} is not supported: one choice per request", name)
  if body.get("logprobs") not in (None, False) or body.get("top_logprobs") not in (None, 0):
    raise _bad("logprobs are not supported", "logprobs")
  if not chat and body.get("echo"):
    raise _bad("echo is not supported", "echo")
  if not chat and body.get("suffix"):
    raise _bad("suffix is not supported", "suffix")
  for name in ("presence_penalty", "frequency_penalty"):
    if _number(body, name, 0.0) != 0.0:
      raise _bad(f"{name} is not supported (only 0)", name)
  if body.get("repetition_penalty") not in (None, 1, 1.0):
    raise _bad("repetition_penalty is not supported (only 1)", "repetition_penalty")


def _prompt_ids(body: dict, tokenizer) -> list[int]:
  if "prompt" not in body or body["prompt"] is None:
    raise _bad("missing required field 'prompt'", "prompt")
  prompt = body["prompt"]
  if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
    prompt = prompt[0]   # a batch of one
  if isinstance(prompt, str):
    if not prompt:
      raise _bad("prompt is empty", "prompt")
    if tokenizer is None:
      raise _bad("this model has no tokenizer: send the prompt as a list of token ids", "prompt")
    return tokenizer.encode(prompt)
  if isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
    return [int(t) for t in prompt]
  if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
    raise _bad(f"one prompt per request is supported, got {len(prompt)}", "prompt")
  raise _bad("prompt must be a non-empty string or a non-empty list of token ids", "prompt")


def _content(message, index: int) -> str:
  content = message.get("content")
  if isinstance(content, str):
    return content
  if content is None:
    return ""
  if isinstance(content, list):
    parts = []
    for part in content:
      if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
        raise _bad(f"messages[{index}].content: only text parts ({{'type': 'text', 'text': ...}}) are supported",
                   "messages")
      parts.append(part["text"])
    return "".join(parts)
  raise _bad(f"messages[{index}].content must be a string or a list of text parts", "messages")


def _chat_ids(body: dict, tokenizer) -> list[int]:
  messages = body.get("messages")
  if messages is None:
    raise _bad("missing required field 'messages'", "messages")
  if not isinstance(messages, list) or not messages:
    raise _bad("messages must be a non-empty list", "messages")
  clean = []
  for i, message in enumerate(messages):
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
      raise _bad(f"messages[{i}] must be an object with a string 'role'", "messages")
    clean.append({"role": message["role"], "content": _content(message, i)})
  if tokenizer is None or not tokenizer.chat_template:
    raise _bad("this model has no chat template: use /v1/completions", "messages")
  try:
    return tokenizer.apply_chat_template(clean)
  except Exception as error:  # a template's own raise_exception (e.g. roles out of order)
    raise _bad(f"the chat template refused the messages: {error}", "messages") from None


def _stop(body: dict) -> tuple[str, ...]:
  stop = body.get("stop")
  if stop is None:
    return ()
  if isinstance(stop, str):
    stop = [stop]
  if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
    raise _bad("stop must be a non-empty string or a list of them", "stop")
  return tuple(stop)


def parse(body, *, chat: bool, model_name: str, tokenizer, max_model_len: int) -> Parsed:
  """A validated request from a decoded JSON body (raises ApiError: 400 for a bad field, 404 for another model)."""
  if not isinstance(body, dict):
    raise _bad("the request body must be a JSON object")
  model = body.get("model")
  if model is not None and model != model_name:
    raise ApiError(404, f"the model '{model}' does not exist; this server serves '{model_name}'", "model",
                   "NotFoundError")
  _refuse_unsupported(body, chat)
  ids = _chat_ids(body, tokenizer) if chat else _prompt_ids(body, tokenizer)
  names = ("max_completion_tokens", "max_tokens") if chat else ("max_tokens",)
  name = next((n for n in names if body.get(n) is not None), names[-1])
  max_tokens = body.get(name)
  if max_tokens is None:
    max_tokens = max_model_len - len(ids)
    if max_tokens < 1:
      raise _bad(f"this model's maximum context length is {max_model_len} tokens; the prompt has {len(ids)}", name)
  elif not _is_int(max_tokens) or max_tokens < 1:
    raise _bad(f"{name} must be an int >= 1, got {max_tokens!r}", name)
  seed = body.get("seed")
  if seed is not None and not _is_int(seed):
    raise _bad(f"seed must be an int, got {seed!r}", "seed")
  stream = _flag(body, "stream")
  options = body.get("stream_options") or {}
  if not isinstance(options, dict):
    raise _bad("stream_options must be an object", "stream_options")
  sampling, stop_at_eos = sampling_of(body), not _flag(body, "ignore_eos")
  try:
    request = Request(tuple(ids), int(max_tokens), sampling, seed=None if seed is None else int(seed),
                      stop_at_eos=stop_at_eos)
  except ValueError as error:
    raise _bad(str(error)) from None
  return Parsed(request=request, chat=chat, stream=stream, include_usage=stream and bool(options.get("include_usage")),
                stop=_stop(body), return_token_ids=_flag(body, "return_token_ids"))


# ---- responses ---------------------------------------------------------------------------------------------------

def new_id(chat: bool) -> str:
  return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
  return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
          "total_tokens": prompt_tokens + completion_tokens}


def spec_decode(stats: RequestStats | None, k: int, method: str) -> dict:
  """The request's speculation statistics (rounds: verification calls of its row; draft / accepted tokens;
  acceptance rate = accepted / drafted; mean acceptance length = 1 + accepted / rounds, tokens per round)."""
  if stats is None:
    return {"method": method, "k": k, "rounds": 0, "draft_tokens": 0, "accepted_tokens": 0, "acceptance_rate": None,
            "mean_acceptance_length": None, "accepted_per_position": []}
  return {"method": method, "k": k, "rounds": stats.rounds, "draft_tokens": stats.draft_tokens,
          "accepted_tokens": stats.accepted_tokens, "acceptance_rate": stats.acceptance_rate,
          "mean_acceptance_length": stats.mean_acceptance_length,
          "accepted_per_position": list(stats.accepted_per_position)}


def _choice(chat: bool, text: str, finish_reason, token_ids, delta: bool, first: bool = False) -> dict:
  if chat:
    body = ({"role": "assistant", "content": text} if first else {"content": text}) if delta else \
        {"role": "assistant", "content": text}
    choice = {"index": 0, ("delta" if delta else "message"): body, "logprobs": None, "finish_reason": finish_reason}
  else:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
  if token_ids is not None:
    choice["token_ids"] = list(token_ids)
  return choice


def response(parsed: Parsed, rid: str, model: str, text: str, token_ids, finish_reason: str, usage_: dict,
             spec: dict) -> dict:
  """The non-streaming response."""
  return {"id": rid, "object": "chat.completion" if parsed.chat else "text_completion", "created": int(time.time()),
          "model": model, "choices": [_choice(parsed.chat, text, finish_reason,
                                              token_ids if parsed.return_token_ids else None, delta=False)],
          "usage": usage_, "spec_decode": spec}


def chunk(parsed: Parsed, rid: str, model: str, text: str, token_ids=(), finish_reason=None, first: bool = False,
          spec: dict | None = None) -> dict:
  """One stream chunk (the last one, with finish_reason, also carries `spec_decode`)."""
  out = {"id": rid, "object": "chat.completion.chunk" if parsed.chat else "text_completion",
         "created": int(time.time()), "model": model,
         "choices": [_choice(parsed.chat, text, finish_reason, token_ids if parsed.return_token_ids else None,
                             delta=True, first=first)]}
  if spec is not None:
    out["spec_decode"] = spec
  return out


def usage_chunk(parsed: Parsed, rid: str, model: str, usage_: dict) -> dict:
  """The stream's final chunk under stream_options.include_usage: no choices, the usage."""
  return {"id": rid, "object": "chat.completion.chunk" if parsed.chat else "text_completion",
          "created": int(time.time()), "model": model, "choices": [], "usage": usage_}
