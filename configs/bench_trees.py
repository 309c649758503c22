"""Token trees beside chains on SmolLM2-135M (issue 19): the feature head shipped in the package, trained Medusa
heads, the q4 self-draft and prompt lookup, each at K=4 and with a DynamicTree of 16 nodes (up to 8 deep, top-4;
Medusa's 4 heads grow it 4 deep), greedy, batch 1, every category, paired with autoregressive calls; the paired
cost of verifying 16 tree nodes.

  python scripts/train_draft.py --config=configs/train_medusa.py --config.output_dir=results/train/heads \
      --config.train.steps=150 --config.train.warmup_steps=15
  python scripts/benchmark.py --config=configs/bench_trees.py   # --config.tree_kind=static: balanced static trees;
      # tuned: each method's best static tree at its acceptance per depth and rank on the calibration prompts
"""

from configs import bench_cpu


def get_config():
  c = bench_cpu.get_config()
  c.methods = ("ar", "feature_head", "medusa", "quantized:q4", "prompt_lookup")
  c.drafter_dirs.feature_head = "shipped"  # specjax/drafters/shipped_heads; a trained directory replaces it
  c.drafter_dirs.medusa = "results/train/heads/medusa/drafter"
  c.ks = (4,)
  c.auto_ks = ()
  c.batch_sizes = (1,)
  c.temperatures = (0.0,)
  c.sweep = "axes"
  c.phase_split_batch_sizes = (1,)
  c.phase_split_methods = ("ar",)
  c.tree_nodes = (16,)
  c.tree_depth = 8            # a drafter that drafts fewer levels (Medusa: its 4 heads) grows its tree that deep
  c.tree_top_k = 4
  c.tree_branching = "top_k"  # greedy: the same trees either way; top_k ranks by the draft's own logits
  c.prompts_per_category = 2
  c.max_new_tokens = 64
  c.prompt_bucket = 0
  c.paired_with_ar = True
  c.paired_verify_calls = 20
  c.output_dir = "results/bench_trees"
  return c
