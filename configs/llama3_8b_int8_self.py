"""Quantized self-speculation at Llama-3-8B scale on a TPU v5e slice: the bf16 target drafts for itself from its own
weights in int8 (one scale per output row), the method `specjax.drafters.QuantizedDraft` runs on the CPU.

  python scripts/aot_compile.py --config=configs/llama3_8b_int8_self.py
"""

from configs import llama3_8b_1b

# Measured, not assumed: the int8 self-draft of SmolLM2-135M-Instruct, greedy, K=4, batch 1, accepted 0.938-0.979
# of drafts per category, median 0.958 (configs/bench_quantized.py, docs/results.md section 12). A larger model
# loses less to int8 rounding; its own rate is one scripts/benchmark.py run away.
INT8_SELF_DRAFT_ACCEPTANCE = 0.958


def int8_self_draft(c):
  """An AOT config `c` with its draft replaced by the target's own weights in int8, at the measured acceptance."""
  c.self_draft = True          # the draft is the target's architecture ...
  c.draft_weights = "int8"     # ... on its own weights in int8: half the bytes of bf16
  c.acceptance_rate = INT8_SELF_DRAFT_ACCEPTANCE
  return c


def get_config():
  c = int8_self_draft(llama3_8b_1b.get_config())   # 8.0 GB of draft weights instead of the target's 16.1 GB
  c.output_dir = "results/aot/llama3_8b_int8_self"
  return c
