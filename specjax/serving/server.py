"""The OpenAI-compatible HTTP server over a serving `Engine`: a Starlette app (`create_app`) run by uvicorn (`run`).

Endpoints: POST /v1/completions and /v1/chat/completions (JSON, or server-sent events with `stream: true`:
`data: {chunk}` ... `data: [DONE]`), GET /v1/models, /health and /metrics (Prometheus text, vLLM's names).

The engine runs in its own thread; a request's updates hop onto the event loop through `loop.call_soon_threadsafe`
into an asyncio queue, so no JAX call ever runs on the loop. A client that disconnects cancels its request, which
frees its slot; a request the engine cannot take gets a JSON error naming the problem (400, 404 for another model,
429 when the queue is full, 503 while shutting down). On SIGTERM uvicorn stops accepting, lets in-flight requests
finish within `shutdown_timeout_s` (then cancels them) and the app's shutdown stops the engine, which cancels the
rest.

The server listens on 127.0.0.1 unless configured otherwise. With an API key (`api_key`, or `SPECJAX_API_KEY` when
that is empty) every endpoint but /health requires `Authorization: Bearer <key>` and answers 401 without it; the key
is compared in constant time and never logged or echoed.
"""

import asyncio
import contextlib
import hmac
import json
import logging
import os
import signal
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

from specjax.serving import openai_protocol as protocol
from specjax.serving.configured import build_engine
from specjax.serving.detokenizer import TextStream
from specjax.serving.engine import Engine
from specjax.serving.metrics import prometheus_text
from specjax.serving.openai_protocol import ApiError
from specjax.serving.request import QueueFull, RequestHandle

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"           # loopback: nothing off this machine reaches the server unless configured to
DEFAULT_PORT = 8000
API_KEY_ENV = "SPECJAX_API_KEY"       # the API key when the config's `api_key` is empty
OPEN_PATHS = frozenset({"/health"})  # answered without the key (load balancers' and orchestrators' probes)

# How an engine finish reason reads in a stream's last chunk ("abort" is vLLM's word for a request it dropped).
_STREAM_REASONS = {"stop": "stop", "length": "length", "cancelled": "abort", "error": "error"}


class _Updates:
  """The sink of one request: the engine's thread puts its updates on the event loop's queue."""

  def __init__(self, loop: asyncio.AbstractEventLoop):
    self._loop = loop
    self.queue: asyncio.Queue = asyncio.Queue()

  def __call__(self, update) -> None:
    try:
      self._loop.call_soon_threadsafe(self.queue.put_nowait, update)
    except RuntimeError:  # the loop is closed: nobody is listening any more
      pass


class _Generation:
  """One request's tokens turned into text as they arrive: cut at a stop string (which cancels the request), with
  the final update (its stats and finish reason) kept."""

  def __init__(self, handle: RequestHandle, updates: _Updates, parsed: protocol.Parsed, tokenizer):
    self.handle, self.updates = handle, updates
    self.text = TextStream(tokenizer, parsed.stop)
    self.token_ids: list[int] = []
    self.final = None
    self.finish_reason = None

  async def pieces(self):
    """(new text, new token ids) per update; the last one comes after `final` is set."""
    while True:
      update = await self.updates.queue.get()
      piece, ids = "", []
      for token in update.token_ids:
        if self.text.stopped:
          break
        piece += self.text.push(token)
        ids.append(token)
      self.token_ids += ids
      if self.text.stopped and not update.finished:
        self.handle.cancel()
        while not update.finished:   # its last update, with the stats
          update = await self.updates.queue.get()
      if update.finished:
        self.final = update
        if not self.text.stopped:
          piece += self.text.flush()
        self.finish_reason = "stop" if self.text.stopped else update.finish_reason
        yield piece, ids
        return
      if piece or ids:
        yield piece, ids


class _Stream(StreamingResponse):
  """A server-sent-event response that cancels its request however it ends (finished, client gone, shutdown), even
  when the body never started."""

  def __init__(self, content, handle: RequestHandle):
    super().__init__(content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    self._handle = handle

  async def __call__(self, scope, receive, send):
    try:
      await super().__call__(scope, receive, send)
    finally:
      self._handle.cancel()


def _sse(payload) -> str:
  return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def _error_response(error: ApiError) -> JSONResponse:
  return JSONResponse(error.body(), status_code=error.status)


def resolve_api_key(configured: str = "") -> str:
  """The key requests must present: `configured` (the config's `api_key`), else $SPECJAX_API_KEY, else "" (none)."""
  return _checked_key(configured or os.environ.get(API_KEY_ENV, ""))


def _checked_key(api_key: str) -> str:
  if api_key and not all("!" <= c <= "~" for c in api_key):   # the message must not name the key
    raise ValueError("the API key must be printable ASCII without spaces (it travels in an HTTP header)")
  return api_key


def listen_address(config) -> tuple[str, int]:
  """(host, port) a serve config asks for; loopback and 8000 where it names none."""
  return config.get("host", "") or DEFAULT_HOST, config.get("port", DEFAULT_PORT)


class _RequireApiKey:
  """ASGI middleware: an HTTP request to any path but OPEN_PATHS passes only with `Authorization: Bearer <key>`,
  otherwise it gets a 401 in the API's error format (the key it sent, if any, is not echoed)."""

  def __init__(self, app, api_key: str):
    self.app = app
    self._key = api_key.encode()

  async def __call__(self, scope, receive, send):
    if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
      await self.app(scope, receive, send)
      return
    sent = [value for name, value in scope["headers"] if name == b"authorization"]
    scheme, _, token = sent[0].partition(b" ") if len(sent) == 1 else (b"", b"", b"")
    if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._key):
      await self.app(scope, receive, send)
      return
    message = ("invalid API key" if scheme.lower() == b"bearer" else
               "an API key is required: send the header 'Authorization: Bearer <key>'")
    response = JSONResponse(ApiError(401, message, None, "authentication_error").body(), status_code=401,
                            headers={"WWW-Authenticate": "Bearer"})
    await response(scope, receive, send)


def create_app(engine: Engine, model_name: str, *, method: str = "", manage_engine: bool = True,
               api_key: str = "") -> Starlette:
  """The app over `engine` serving `model_name` (the `model` a request must name, if it names one). method: the
  drafter's registry name ("" for autoregressive), reported in each response's `spec_decode`. manage_engine: the
  app starts the engine's thread at startup (unless running) and stops it at shutdown. api_key: if not "", every
  endpoint but /health requires `Authorization: Bearer <api_key>` (401 otherwise); printable ASCII, no spaces."""
  _checked_key(api_key)
  tokenizer = engine.target.tokenizer
  k = engine.max_k if engine.drafter is not None else 0
  created = int(time.time())

  def spec_of(stats) -> dict:
    return protocol.spec_decode(stats, k, method or "autoregressive")

  async def submit(http: HttpRequest, chat: bool):
    try:
      body = await http.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
      raise ApiError(400, f"the request body is not valid JSON: {error}") from None
    parsed = protocol.parse(body, chat=chat, model_name=model_name, tokenizer=tokenizer,
                            max_model_len=engine.max_model_len)
    updates = _Updates(asyncio.get_running_loop())
    try:
      handle = engine.submit(parsed.request, sink=updates)
    except QueueFull as error:
      raise ApiError(429, str(error), None, "rate_limit_error") from None
    except ValueError as error:
      raise ApiError(400, str(error)) from None
    except RuntimeError as error:
      raise ApiError(503, str(error), None, "server_error") from None
    return parsed, handle, _Generation(handle, updates, parsed, tokenizer)

  async def generate(http: HttpRequest, chat: bool):
    try:
      parsed, handle, generation = await submit(http, chat)
    except ApiError as error:
      return _error_response(error)
    rid = protocol.new_id(chat)
    if parsed.stream:
      return _Stream(stream(parsed, handle, generation, rid), handle)
    watcher = asyncio.create_task(cancel_on_disconnect(http, handle))
    try:
      async for _ in generation.pieces():
        pass
    finally:
      watcher.cancel()
      handle.cancel()
    final = generation.final
    if generation.finish_reason == "error":
      return _error_response(ApiError(500, f"generation failed: {final.error}", None, "server_error"))
    if generation.finish_reason == "cancelled":
      return _error_response(ApiError(503, "the request was cancelled (the server is shutting down)", None,
                                      "server_error"))
    usage = protocol.usage(len(parsed.request.prompt_ids), len(generation.token_ids))
    return JSONResponse(protocol.response(parsed, rid, model_name, generation.text.text, generation.token_ids,
                                          generation.finish_reason, usage, spec_of(final.stats)))

  async def cancel_on_disconnect(http: HttpRequest, handle: RequestHandle):
    while not handle.finished:
      if await http.is_disconnected():
        handle.cancel()
        return
      await asyncio.sleep(0.2)

  async def stream(parsed, handle, generation, rid):
    try:
      if parsed.chat:
        yield _sse(protocol.chunk(parsed, rid, model_name, "", first=True))
      async for piece, ids in generation.pieces():
        if generation.final is None:
          yield _sse(protocol.chunk(parsed, rid, model_name, piece, ids))
          continue
        if generation.finish_reason == "error":
          yield _sse(ApiError(500, f"generation failed: {generation.final.error}", None, "server_error").body())
        yield _sse(protocol.chunk(parsed, rid, model_name, piece, ids, _STREAM_REASONS[generation.finish_reason],
                                  spec=spec_of(generation.final.stats)))
      if parsed.include_usage:
        yield _sse(protocol.usage_chunk(parsed, rid, model_name,
                                        protocol.usage(len(parsed.request.prompt_ids), len(generation.token_ids))))
      yield "data: [DONE]\n\n"
    finally:   # also when the client went away: its slot is freed
      handle.cancel()

  async def completions(http: HttpRequest):
    return await generate(http, chat=False)

  async def chat_completions(http: HttpRequest):
    return await generate(http, chat=True)

  async def models(http: HttpRequest):
    return JSONResponse({"object": "list", "data": [{"id": model_name, "object": "model", "created": created,
                                                     "owned_by": "specjax", "root": model_name,
                                                     "max_model_len": engine.max_model_len}]})

  async def health(http: HttpRequest):
    if manage_engine and not engine.alive:
      return JSONResponse({"status": "engine stopped"}, status_code=503)
    return JSONResponse({"status": "ok", "running": engine.num_running, "waiting": engine.num_waiting})

  async def metrics(http: HttpRequest):
    return PlainTextResponse(prometheus_text(engine.metrics.snapshot(), model_name),
                             media_type="text/plain; version=0.0.4; charset=utf-8")

  async def http_error(http: HttpRequest, error: HTTPException):
    kind = "NotFoundError" if error.status_code == 404 else "invalid_request_error"
    return _error_response(ApiError(error.status_code, f"{http.method} {http.url.path}: {error.detail}", None, kind))

  async def server_error(http: HttpRequest, error: Exception):
    log.exception("request failed")
    return _error_response(ApiError(500, f"{type(error).__name__}: {error}", None, "server_error"))

  @contextlib.asynccontextmanager
  async def lifespan(app):
    if manage_engine and not engine.alive:
      engine.start()
    try:
      yield
    finally:
      if manage_engine:
        await asyncio.get_running_loop().run_in_executor(None, engine.stop)

  routes = [Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"])]
  middleware = [Middleware(_RequireApiKey, api_key=api_key)] if api_key else []
  return Starlette(routes=routes, lifespan=lifespan, middleware=middleware,
                   exception_handlers={HTTPException: http_error, Exception: server_error})


def run(config) -> None:
  """Builds the engine, compiles its programs for the configured warmup settings, then serves until SIGTERM /
  SIGINT (uvicorn's graceful shutdown). Listens on `listen_address(config)`; requires the key `resolve_api_key`
  finds, if any."""
  from specjax.sampling import SamplingParams
  host, port = listen_address(config)
  api_key = resolve_api_key(config.get("api_key", ""))
  engine, name, method = build_engine(config)
  started = time.perf_counter()
  engine.warmup(samplings=tuple(SamplingParams(t) for t in config.warmup_temperatures),
                prompt_lengths=tuple(config.warmup_prompt_lengths), all_buckets=config.get("warmup_all_buckets", True),
                admit_rows=tuple(config.get("warmup_admit_rows", (1,))))
  if engine.round_costs:
    print(f"adaptive policy: round cost per K in {engine.k.branch_ks} (autoregressive step = 1) by rows served: "
          f"{engine.round_costs}", flush=True)
  k = ("k=auto" if config.get("adaptive") else f"k={engine.max_k}") if method else ""
  print(f"serving {name} ({engine.target.config.param_count() / 1e6:.1f}M parameters; "
        f"{method or 'autoregressive'}{', ' + k if k else ''}; {engine.slots} slots, "
        f"{engine.rounds_per_step} rounds per step, max_model_len {engine.max_model_len}; warmup "
        f"{time.perf_counter() - started:.1f} s) on http://{host}:{port}"
        f"{' (API key required)' if api_key else ''}", flush=True)
  if not api_key and host not in ("127.0.0.1", "localhost", "::1"):
    log.warning("listening on %s without an API key: anyone who reaches this port can use the server "
                "(set --config.api_key or $%s)", host, API_KEY_ENV)
  app = create_app(engine, name, method=method, api_key=api_key)
  server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=config.log_level,
                                         timeout_graceful_shutdown=config.shutdown_timeout_s))
  if threading.current_thread() is threading.main_thread():
    # uvicorn shuts down gracefully on SIGTERM / SIGINT, then raises the signal again under the handlers it found:
    # these make that a normal exit (status 0) instead of death by the signal.
    for signum in (signal.SIGTERM, signal.SIGINT):
      signal.signal(signum, _exit_normally)
  try:
    server.run()
  finally:
    counters = engine.metrics.snapshot()
    print(f"served milliseconds per round by rows and K: {engine.served_round_ms}", flush=True)
    print(f"shut down: {sum(counters.finished.values())} requests served "
          f"({', '.join(f'{n} {reason}' for reason, n in sorted(counters.finished.items())) or 'none'})", flush=True)


def _exit_normally(signum, frame):
  raise SystemExit(0)
