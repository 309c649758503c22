"""Benchmark harness: task suite, fused and phase-split timing, metrics, theory, quality, peers, reports.

Importable without torch; the HF peer (`peers.py`) imports torch / transformers only when it runs.
"""

from specjax.benchmark.plan import validate_config
from specjax.benchmark.runner import REQUIRED_KEYS, run_benchmark
