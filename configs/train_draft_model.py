"""Distill a small draft model (SmolLM2-135M's first 4 layers and head, every layer trained) from the target.

  python scripts/train_draft.py --config=configs/train_draft_model.py
"""

from configs import train_feature_head


def get_config():
  c = train_feature_head.get_config()
  c.drafters = ("draft_model",)
  c.output_dir = "results/train/draft_model"
  return c
