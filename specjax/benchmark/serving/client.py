"""One streamed request, timed on the client: POST with `stream: true` (and `stream_options.include_usage`), read the
server-sent events, and record TTFT (the first chunk that carries text), ITL (the gaps between text chunks: under
speculation a chunk can carry several tokens, as in vLLM's client), E2EL (send to the end of the stream), output
tokens (the final `usage`, else the text chunks counted), input tokens (`usage`), and the server's per-request
speculation statistics (specjax's `spec_decode`; llama-server's `timings.draft_n` / `draft_n_accepted`). Any failure
(connection, HTTP status, an error event, an aborted stream, a timeout) is recorded in `error`, never raised."""

import asyncio
import dataclasses
import json
import time

import httpx

from specjax.benchmark.serving.workload import BenchRequest


@dataclasses.dataclass
class RequestOutput:
  """What one request measured (seconds; `start_time` on `time.perf_counter`'s clock)."""

  success: bool = False
  error: str = ""
  ttft: float | None = None
  itl: list[float] = dataclasses.field(default_factory=list)
  latency: float | None = None
  output_tokens: int = 0
  prompt_tokens: int = 0
  start_time: float | None = None
  finish_reason: str | None = None
  spec_decode: dict | None = None
  category: str = ""


def request_body(request: BenchRequest, *, chat: bool, model: str | None, temperature: float, ignore_eos: bool,
                 seed: int | None) -> dict:
  """The JSON body: a completion of the prompt (text or token ids) or a one-message chat, streamed with usage."""
  body = {"max_tokens": request.output_len, "temperature": temperature, "stream": True,
          "stream_options": {"include_usage": True}}
  if chat:
    if not isinstance(request.prompt, str):
      raise ValueError("chat endpoints take text prompts, not token ids")
    body["messages"] = [{"role": "user", "content": request.prompt}]
  else:
    body["prompt"] = request.prompt if isinstance(request.prompt, str) else list(request.prompt)
  if model:
    body["model"] = model
  if ignore_eos:
    body["ignore_eos"] = True
  if seed is not None:
    body["seed"] = seed
  return body


def _text_of(choice: dict, chat: bool) -> str:
  if chat:
    return (choice.get("delta") or {}).get("content") or ""
  return choice.get("text") or ""


def _peer_spec(timings) -> dict | None:
  """llama-server's speculation counts (its final chunk's `timings`), in spec_decode's words."""
  if not isinstance(timings, dict) or not timings.get("draft_n"):
    return None
  drafted, accepted = int(timings["draft_n"]), int(timings.get("draft_n_accepted", 0))
  return {"method": "llama-server", "draft_tokens": drafted, "accepted_tokens": accepted,
          "acceptance_rate": accepted / drafted}


def _error_message(status: int, text: str) -> str:
  try:
    message = json.loads(text)["error"]["message"]
  except (ValueError, KeyError, TypeError):
    message = text.strip()[:300]
  return f"HTTP {status}: {message}"


async def _stream(http: httpx.AsyncClient, url: str, body: dict, headers: dict, chat: bool, out: RequestOutput):
  chunks, last_text = 0, None
  usage = None
  async with http.stream("POST", url, json=body, headers=headers) as response:
    if response.status_code != 200:
      out.error = _error_message(response.status_code, (await response.aread()).decode(errors="replace"))
      return
    done = False
    async for line in response.aiter_lines():
      if not line.startswith("data:"):
        continue   # blank separators, comments (": ping"), event names
      data = line[5:].strip()
      if data == "[DONE]":
        done = True
        break
      now = time.perf_counter()
      try:
        event = json.loads(data)
      except json.JSONDecodeError:
        out.error = f"a stream event is not JSON: {data[:200]}"
        return
      if "error" in event:
        error = event["error"]
        out.error = "server error: " + (error.get("message", str(error)) if isinstance(error, dict) else str(error))
        return
      if event.get("usage"):
        usage = event["usage"]
      if event.get("spec_decode") is not None:
        out.spec_decode = event["spec_decode"]
      elif out.spec_decode is None:
        out.spec_decode = _peer_spec(event.get("timings"))
      for choice in event.get("choices") or []:
        if _text_of(choice, chat):
          if last_text is None:
            out.ttft = now - out.start_time
          else:
            out.itl.append(now - last_text)
          last_text = now
          chunks += 1
        if choice.get("finish_reason"):
          out.finish_reason = choice["finish_reason"]
  end = time.perf_counter()
  if out.finish_reason in ("abort", "error"):
    out.error = f"the server ended the stream with finish_reason '{out.finish_reason}'"
    return
  if not done and out.finish_reason is None:
    out.error = "the stream ended without a finish_reason or [DONE]"
    return
  out.latency = end - out.start_time
  if out.ttft is None:   # no text at all (e.g. an immediate end of sequence): the first token came with the end
    out.ttft = out.latency
  out.output_tokens = int(usage["completion_tokens"]) if usage and "completion_tokens" in usage else chunks
  out.prompt_tokens = int(usage.get("prompt_tokens") or 0) if usage else 0
  out.success = True


async def send(http: httpx.AsyncClient, url: str, body: dict, *, headers: dict | None = None, chat: bool = False,
               timeout_s: float | None = None, category: str = "") -> RequestOutput:
  """Sends one streamed request and times it; never raises (but for cancellation): a failure is in `error`."""
  out = RequestOutput(category=category, start_time=time.perf_counter())
  try:
    await asyncio.wait_for(_stream(http, url, body, headers or {}, chat, out), timeout_s)
  except asyncio.TimeoutError:
    out.error = f"timed out after {timeout_s} s"
  except httpx.HTTPError as error:
    out.error = f"{type(error).__name__}: {error or 'no detail'}"
  except Exception as error:   # a malformed event, a client-side fault: still one failed request, not a failed run
    out.error = f"{type(error).__name__}: {error}"
  if out.error:
    out.success = False
  return out
