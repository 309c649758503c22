"""Train a LayerSkip exit adapter for SmolLM2-135M's first 8 layers (the layers themselves stay the target's).

  python scripts/train_draft.py --config=configs/train_layer_skip.py
"""

from configs import train_feature_head


def get_config():
  c = train_feature_head.get_config()
  c.drafters = ("layer_skip",)
  c.output_dir = "results/train/layer_skip"
  return c
