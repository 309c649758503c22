"""Serve a model over an OpenAI-compatible HTTP API with continuous batching and speculative decoding.

  python scripts/serve.py --config=configs/serve_smollm2.py
  python scripts/serve.py --config=configs/serve_smollm2.py --config.drafter=prompt_lookup --config.k=4 --config.port=8001

Then any OpenAI client works against http://127.0.0.1:8000/v1 (/v1/completions, /v1/chat/completions with or
without streaming, /v1/models), plus /health and /metrics (Prometheus). SIGTERM or Ctrl-C shuts down gracefully.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from specjax.host_memory import relaunch_with_huge_pages  # noqa: E402

if __name__ == "__main__":
  relaunch_with_huge_pages()   # before jax loads: the server allocates its KV caches again and again

from absl import app  # noqa: E402
from ml_collections import config_flags  # noqa: E402

import specjax  # noqa: E402
from specjax.serving import server  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", "configs/serve_smollm2.py", "serving config")


def main(argv):
  del argv
  specjax.enable_compilation_cache()
  server.run(_CONFIG.value)


if __name__ == "__main__":
  app.run(main)
