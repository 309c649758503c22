"""Quantized self-speculation at the paper's scale: Chinchilla-70B (bf16) drafts for itself from its own weights in
int8 (one scale per output row) on 16 TPU v4 chips, beside Chen et al.'s separate 4B draft.

  python scripts/aot_compile.py --config=configs/chinchilla_70b_int8_self.py
"""

from configs import chinchilla_70b_4b
from configs.llama3_8b_int8_self import int8_self_draft


def get_config():
  c = int8_self_draft(chinchilla_70b_4b.get_config())   # 70.3 GB of draft weights instead of 140.6 GB
  c.paper = None               # the paper's rows are for its separate 4B draft (configs/chinchilla_70b_4b.py)
  c.output_dir = "results/aot/chinchilla_70b_int8_self"
  return c
