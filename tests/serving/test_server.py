"""The OpenAI-compatible server on loopback (real uvicorn in a thread, a free port, stopped by the test): the `openai`
package completes, streams and chats against it; greedy output equals offline `generate`; bad requests get a 4xx
naming the problem and the server keeps serving; /metrics has vLLM's speculative counters; a full queue gets 429; a
client that disconnects mid-stream frees its slot; with an API key every endpoint but /health answers 401 without it;
the default bind address is loopback; scripts/serve.py (keyed from the environment) stops cleanly on SIGTERM."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest
import uvicorn

import specjax
from configs import serve_smollm2, serve_tiny
from specjax import drafters
from specjax.benchmark.serving.servers import free_port
from specjax.serving import Engine, Request
from specjax.serving.server import create_app, listen_address, resolve_api_key

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "tiny-chat"
GREEDY = specjax.SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def target(tiny_tokenizer):
  config = specjax.ModelConfig(vocab_size=tiny_tokenizer.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                               ffn_dim=64, max_seq_len=256, eos_token_ids=(2,))
  return specjax.init_model(config, seed=3).with_tokenizer(tiny_tokenizer)


@contextlib.contextmanager
def _serving(app):
  """Serves `app` with uvicorn in a thread on a free loopback port; yields its base url, stops it on exit."""
  port = free_port()
  uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                     timeout_graceful_shutdown=5))
  thread = threading.Thread(target=uv.run, daemon=True)
  thread.start()
  deadline = time.time() + 60
  while not uv.started:
    assert time.time() < deadline and thread.is_alive(), "the server did not start"
    time.sleep(0.05)
  try:
    yield f"http://127.0.0.1:{port}"
  finally:
    uv.should_exit = True
    thread.join(30)
  assert not thread.is_alive()


@pytest.fixture(scope="module")
def server(target):
  """(base url, engine): 2 slots, prompt lookup at K=3, one queue place."""
  engine = Engine(target, drafter=drafters.PromptLookup(), k=3, slots=2, rounds_per_step=2, max_queue=1,
                  max_model_len=200)
  with _serving(create_app(engine, NAME, method="prompt_lookup")) as url:
    yield url, engine
  assert not engine.alive
  assert engine.free_slots() == 2


@pytest.fixture(scope="module")
def client(server):
  return openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_openai_client_completes_streams_and_chats(server, client, target):
  assert [m.id for m in client.models.list()] == [NAME]

  offline = specjax.generate(target, ["hello world, hello"], max_new_tokens=12, sampling=GREEDY)
  done = client.completions.create(model=NAME, prompt="hello world, hello", max_tokens=12, temperature=0,
                                   extra_body={"return_token_ids": True})
  choice = done.choices[0]
  assert choice.model_extra["token_ids"] == offline.tokens[0] and choice.text == offline.texts[0]
  assert choice.finish_reason == ("stop" if 2 in offline.tokens[0] else "length")
  assert done.usage.completion_tokens == len(offline.tokens[0])
  assert done.usage.prompt_tokens == len(offline.prompt_tokens[0])
  spec = done.model_extra["spec_decode"]
  assert spec["method"] == "prompt_lookup" and spec["k"] == 3 and spec["rounds"] >= 1
  assert spec["draft_tokens"] == 3 * spec["rounds"]
  assert spec["mean_acceptance_length"] == pytest.approx(1 + spec["accepted_tokens"] / spec["rounds"])

  chunks = list(client.completions.create(model=NAME, prompt="hello world, hello", max_tokens=12, temperature=0,
                                          stream=True, stream_options={"include_usage": True}))
  assert "".join(c.choices[0].text for c in chunks if c.choices) == choice.text
  finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
  assert len(finals) == 1 and finals[0].model_extra["spec_decode"]["rounds"] == spec["rounds"]
  assert chunks[-1].usage.completion_tokens == done.usage.completion_tokens

  offline_chat = specjax.generate(target, ["say hello"], max_new_tokens=10, sampling=GREEDY, chat=True)
  chat = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "say hello"}],
                                        max_tokens=10, temperature=0)
  assert chat.choices[0].message.role == "assistant"
  assert chat.choices[0].message.content == offline_chat.texts[0]
  stream = list(client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "say hello"}],
                                               max_tokens=10, temperature=0, stream=True))
  assert stream[0].choices[0].delta.role == "assistant"
  assert "".join(c.choices[0].delta.content or "" for c in stream) == offline_chat.texts[0]

  sampled = client.completions.create(model=NAME, prompt="hello", max_tokens=5, temperature=1.0, top_p=0.9, seed=1)
  assert sampled.usage.completion_tokens <= 5


def test_stop_strings_end_the_text(server, client):
  full = client.completions.create(model=NAME, prompt="hello world, hello", max_tokens=12, temperature=0).choices[0]
  stop = full.text[3:5]
  cut = client.completions.create(model=NAME, prompt="hello world, hello", max_tokens=12, temperature=0,
                                  stop=[stop]).choices[0]
  assert cut.text == full.text[:full.text.index(stop)] and cut.finish_reason == "stop"
  assert server[1].free_slots() == 2 or _wait(lambda: server[1].free_slots() == 2)


def _wait(condition, seconds=30.0) -> bool:
  deadline = time.time() + seconds
  while not condition():
    if time.time() > deadline:
      return False
    time.sleep(0.02)
  return True


@pytest.mark.parametrize("path,body,status,message", [
    ("/v1/completions", b"{not json", 400, "not valid JSON"),
    ("/v1/completions", b"[1, 2]", 400, "JSON object"),
    ("/v1/completions", {"max_tokens": 4}, 400, "'prompt'"),
    ("/v1/completions", {"prompt": "hello", "max_tokens": 0}, 400, "max_tokens must be an int >= 1"),
    ("/v1/completions", {"prompt": "hello", "max_tokens": -3}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "hello", "temperature": -0.5}, 400, "temperature must be >= 0"),
    ("/v1/completions", {"prompt": "hello", "top_p": 0}, 400, "top_p must be in (0, 1]"),
    ("/v1/completions", {"prompt": "hello", "top_p": 1.5}, 400, "top_p"),
    ("/v1/completions", {"prompt": "hello " * 150, "max_tokens": 10}, 400, "maximum context length is 200"),
    ("/v1/completions", {"prompt": [1, 2, 9999]}, 400, "outside the vocabulary"),
    ("/v1/completions", {"prompt": ["a", "b"]}, 400, "one prompt per request"),
    ("/v1/completions", {"prompt": "hello", "n": 2}, 400, "n=2"),
    ("/v1/completions", {"prompt": "hello", "model": "gpt-4"}, 404, "'gpt-4' does not exist"),
    ("/v1/completions", {"prompt": "hello", "seed": 2**70}, 400, "seed must be a 64-bit int"),
    ("/v1/completions", {"prompt": "hello", "stream": "yes"}, 400, "stream must be true or false"),
    ("/v1/chat/completions", {"model": NAME}, 400, "'messages'"),
    ("/v1/chat/completions", {"messages": [{"content": "hi"}]}, 400, "role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0}, 400,
     "max_completion_tokens"),
    ("/v1/nothing", {}, 404, "Not Found"),
])
def test_bad_requests_are_named_and_the_server_keeps_serving(server, path, body, status, message):
  url = server[0] + path
  content = body if isinstance(body, bytes) else json.dumps(body).encode()
  reply = httpx.post(url, content=content, headers={"content-type": "application/json"}, timeout=60)
  assert reply.status_code == status, reply.text
  assert message in reply.json()["error"]["message"]
  assert httpx.get(server[0] + "/health", timeout=10).status_code == 200


def test_after_bad_requests_a_good_one_is_served(server):
  reply = httpx.post(server[0] + "/v1/completions", json={"prompt": "hello", "max_tokens": 3, "temperature": 0},
                     timeout=60)
  assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3


def test_metrics_have_the_speculative_counters(server, client):
  client.completions.create(model=NAME, prompt="hello hello hello", max_tokens=8, temperature=0)
  text = httpx.get(server[0] + "/metrics", timeout=10).text
  values = {}
  for line in text.splitlines():
    if line and not line.startswith("#"):
      name, value = line.rsplit(" ", 1)
      values[name] = float(value)
  label = f'model_name="{NAME}"'
  drafts = values[f"vllm:spec_decode_num_drafts_total{{{label}}}"]
  assert drafts > 0 and values[f"vllm:spec_decode_num_draft_tokens_total{{{label}}}"] == 3 * drafts
  accepted = values[f"vllm:spec_decode_num_accepted_tokens_total{{{label}}}"]
  per_pos = [values[f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{label},position="{i}"}}'] for i in range(3)]
  assert sum(per_pos) == accepted
  assert "# TYPE vllm:spec_decode_num_drafts counter" in text
  assert values[f"vllm:generation_tokens_total{{{label}}}"] >= 8


def test_a_full_queue_gets_429(server):
  url, engine = server
  with engine.paused():
    held = [engine.submit(Request((5, 6, 7), 4, GREEDY)) for _ in range(engine.slots + engine.max_queue)]
    reply = httpx.post(url + "/v1/completions", json={"prompt": "hello", "max_tokens": 2}, timeout=60)
    assert reply.status_code == 429 and "queue" in reply.json()["error"]["message"]
    for handle in held:
      handle.cancel()
  assert _wait(lambda: all(h.finished for h in held) and engine.num_waiting == 0)
  assert httpx.get(url + "/health", timeout=10).status_code == 200


def test_client_disconnect_cancels_the_request_and_frees_its_slot(server):
  url, engine = server
  before = engine.metrics.snapshot().finished.get("cancelled", 0)
  with httpx.stream("POST", url + "/v1/completions", timeout=60,
                    json={"prompt": "hello", "max_tokens": 180, "temperature": 0, "stream": True}) as reply:
    lines = reply.iter_lines()
    first = next(line for line in lines if line.startswith("data: "))
    assert json.loads(first[6:])["choices"][0]["finish_reason"] is None
    engine.pause()  # the request cannot finish now; the disconnect must cancel it
  try:
    assert _wait(lambda: engine.num_running == 0), "the slot was not freed"
  finally:
    engine.resume()
  assert engine.metrics.snapshot().finished.get("cancelled", 0) == before + 1
  assert engine.free_slots() == 2


KEY = "sk-test-0123456789abcdef"


@pytest.fixture(scope="module")
def keyed(server):
  """The base url of a second app over the module's (running) engine that requires KEY."""
  with _serving(create_app(server[1], NAME, method="prompt_lookup", manage_engine=False, api_key=KEY)) as url:
    yield url


def test_with_a_key_every_endpoint_but_health_needs_it(keyed):
  for method, path in [("GET", "/v1/models"), ("GET", "/metrics"), ("POST", "/v1/completions"),
                       ("POST", "/v1/chat/completions"), ("GET", "/v1/nothing")]:
    for headers in [{}, {"Authorization": "Bearer wrong-key"}, {"Authorization": f"Bearer {KEY}x"},
                    {"Authorization": KEY}, {"Authorization": f"Basic {KEY}"}]:
      reply = httpx.request(method, keyed + path, headers=headers, json={"prompt": "hello", "max_tokens": 2},
                            timeout=10)
      assert reply.status_code == 401, (method, path, headers, reply.text)
      assert reply.headers["www-authenticate"] == "Bearer"
      error = reply.json()["error"]
      assert error["type"] == "authentication_error" and error["code"] == 401
      assert "wrong-key" not in reply.text and KEY not in reply.text
  assert httpx.get(keyed + "/health", timeout=10).status_code == 200

  right = {"Authorization": f"Bearer {KEY}"}
  assert httpx.get(keyed + "/v1/models", headers=right, timeout=10).status_code == 200
  metrics = httpx.get(keyed + "/metrics", headers=right, timeout=10)
  assert metrics.status_code == 200 and "vllm:spec_decode_num_drafts" in metrics.text
  assert httpx.get(keyed + "/v1/nothing", headers=right, timeout=10).status_code == 404


def test_the_openai_client_with_the_key_is_served_and_without_it_refused(keyed):
  client = openai.OpenAI(base_url=keyed + "/v1", api_key=KEY, max_retries=0, timeout=120)
  assert [m.id for m in client.models.list()] == [NAME]
  done = client.completions.create(model=NAME, prompt="hello world", max_tokens=4, temperature=0)
  assert done.usage.completion_tokens == 4
  stream = list(client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=3, temperature=0, stream=True))
  assert stream[-1].choices[0].finish_reason is not None
  wrong = openai.OpenAI(base_url=keyed + "/v1", api_key="sk-wrong", max_retries=0, timeout=30)
  with pytest.raises(openai.AuthenticationError) as refused:
    wrong.completions.create(model=NAME, prompt="hello", max_tokens=2)
  assert refused.value.status_code == 401 and "sk-wrong" not in str(refused.value)


def test_without_a_key_nothing_needs_one(server, client):
  url = server[0]
  for path in ["/v1/models", "/metrics", "/health"]:
    assert httpx.get(url + path, timeout=10).status_code == 200
  reply = httpx.post(url + "/v1/completions", json={"prompt": "hello", "max_tokens": 2, "temperature": 0}, timeout=60)
  assert reply.status_code == 200


def test_the_key_comes_from_the_config_or_the_environment(monkeypatch, server):
  monkeypatch.delenv("SPECJAX_API_KEY", raising=False)
  assert resolve_api_key("") == ""
  assert resolve_api_key("from-config") == "from-config"
  monkeypatch.setenv("SPECJAX_API_KEY", "from-env")
  assert resolve_api_key("") == "from-env" and resolve_api_key("from-config") == "from-config"
  for bad in ["has space", "tab\tkey", "ключ", " lead"]:
    with pytest.raises(ValueError) as error:
      resolve_api_key(bad)
    assert bad not in str(error.value)
    with pytest.raises(ValueError):
      create_app(server[1], NAME, manage_engine=False, api_key=bad)


def test_the_default_bind_address_is_loopback():
  for config in (serve_smollm2.get_config(), serve_tiny.get_config()):
    assert config.host == "127.0.0.1" and config.api_key == ""
    assert listen_address(config) == ("127.0.0.1", 8000)
  bare = serve_smollm2.get_config()
  del bare["host"], bare["port"]
  assert listen_address(bare) == ("127.0.0.1", 8000)
  bare.host = ""
  assert listen_address(bare)[0] == "127.0.0.1"


def test_serve_script_answers_and_stops_on_sigterm():
  """Keyed from the environment: 401 without the key, served with it, the key in none of its output."""
  port = free_port()
  process = subprocess.Popen([sys.executable, "scripts/serve.py", "--config=configs/serve_tiny.py",
                              f"--config.port={port}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=dict(os.environ, JAX_PLATFORMS="cpu", SPECJAX_API_KEY=KEY))
  url = f"http://127.0.0.1:{port}"
  auth = {"Authorization": f"Bearer {KEY}"}
  try:
    deadline = time.time() + 120
    while True:
      assert process.poll() is None, process.communicate()[1][-2000:]
      assert time.time() < deadline, "the server did not come up"
      try:
        if httpx.get(url + "/health", timeout=2).status_code == 200:
          break
      except httpx.TransportError:
        time.sleep(0.2)
    body = {"model": "tiny", "prompt": [1, 2, 3, 1, 2], "max_tokens": 5, "temperature": 0}
    assert httpx.post(url + "/v1/completions", json=body, timeout=60).status_code == 401
    reply = httpx.post(url + "/v1/completions", json=body, headers=auth, timeout=60)
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 5
    # a stream in flight at SIGTERM ends with [DONE] (finished within the grace period, or aborted)
    with httpx.stream("POST", url + "/v1/completions", timeout=60, headers=auth,
                      json={"prompt": [1, 2, 3], "max_tokens": 240, "temperature": 0, "stream": True}) as stream:
      lines = stream.iter_lines()
      next(line for line in lines if line.startswith("data: "))
      process.send_signal(signal.SIGTERM)
      rest = [line for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]"
    assert json.loads(rest[-2][6:])["choices"][0]["finish_reason"] in ("length", "abort")
    out, err = process.communicate(timeout=60)
  finally:
    if process.poll() is None:
      process.kill()
      process.communicate()
  assert process.returncode == 0, err[-2000:]
  assert "serving tiny" in out and "on http://127.0.0.1:" in out and "(API key required)" in out
  assert "shut down: 2 requests served" in out
  assert KEY not in out and KEY not in err
