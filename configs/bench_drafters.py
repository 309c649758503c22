"""Every drafter side by side on SmolLM2-135M (issue 6's table): prompt lookup, the draft model, layer skip, Medusa
and the feature head (the one shipped in the package; the others trained from scripts/train_draft.py's default
output directories), at batch 1 and 2, K 2 and 4, greedy, every category; phase-split at batch 1 for the cost ratio.

  python scripts/train_draft.py --config=configs/train_medusa.py   # (and train_layer_skip, train_draft_model) first
  python scripts/benchmark.py --config=configs/bench_drafters.py
"""

from configs import bench_cpu


def get_config():
  c = bench_cpu.get_config()
  c.methods = ("ar", "draft_model", "prompt_lookup", "layer_skip", "medusa", "feature_head")
  for kind in ("draft_model", "layer_skip", "medusa"):
    c.drafter_dirs[kind] = f"results/train/{kind}/{kind}/drafter"
  c.drafter_dirs.feature_head = "shipped"  # specjax/drafters/shipped_heads; a trained directory replaces it
  c.ks = (2, 4)
  c.auto_ks = ()
  c.batch_sizes = (1, 2)
  c.temperatures = (0.0,)
  c.sweep = "axes"
  c.phase_split_batch_sizes = (1,)
  c.prompts_per_category = 2
  c.max_new_tokens = 64
  c.prompt_bucket = 0  # each category's own power-of-two bucket: short prompts are not padded to the long ones
  c.paired_with_ar = True  # unpaired, the same cell moved by 20% between runs (long context: 1.39x, then 0.95x)
  c.paired_verify_calls = 20
  c.output_dir = "results/bench_drafters"
  return c
