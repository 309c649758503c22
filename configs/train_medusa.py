"""Train Medusa heads (4 residual heads on SmolLM2-135M's last hidden state) on the shared corpus.

  python scripts/train_draft.py --config=configs/train_medusa.py
"""

from configs import train_feature_head


def get_config():
  c = train_feature_head.get_config()
  c.drafters = ("medusa",)
  c.output_dir = "results/train/medusa"
  return c
