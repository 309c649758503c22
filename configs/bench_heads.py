"""Tokens per round of trained heads on every held-out benchmark prompt (9-10 per category), chain K=4 beside a
16-node tree (8 deep, top-8), greedy, batch 1, no paired timing: the acceptance figure a head is chosen by. Two
prompts per category (configs/bench_trees.py) move tokens per round by up to 0.8 (structured: 3.17 on 2 prompts,
2.38 on 9).

  python scripts/benchmark.py --config=configs/bench_heads.py \
      --config.methods="('feature_head','feature_head:results/train/RUN/feature_head/drafter')"
"""

from configs import bench_trees


def get_config():
  c = bench_trees.get_config()
  c.methods = ("feature_head",)  # the shipped head; "feature_head:DIR" adds a trained one beside it
  c.prompts_per_category = 0     # all of them
  c.paired_with_ar = False
  c.paired_verify_calls = 0
  c.tree_top_k = 8               # the head's 16-node tree, 8 deep: top-8 beat top-4 in every category (section 53)
  c.output_dir = "results/bench_heads"
  return c
