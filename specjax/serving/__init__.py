"""Serving: a continuous-batching engine with speculative decoding over S decode slots (`Engine`), the requests it
takes and the updates it streams back (`request`), its counters (`metrics`), and on top an OpenAI-compatible HTTP
server (`specjax.serving.server`, imported on its own: the engine never needs an HTTP stack)."""

from specjax.serving.engine import Engine
from specjax.serving.metrics import EngineMetrics, prometheus_text
from specjax.serving.request import Completion, QueueFull, Request, RequestHandle, RequestStats, Update
