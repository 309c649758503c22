"""Train drafters (feature head, Medusa heads, LayerSkip exit adapter, distilled draft model) for a target.

  python scripts/train_draft.py --config=configs/train_feature_head.py
  python scripts/train_draft.py --config=configs/train_draft_smoke.py      # every kind, a few steps (CI)

Rerunning the same command resumes from the latest checkpoint. Results: output_dir/metrics.json, and per kind
output_dir/<kind>/{metrics.json, metrics.jsonl, curves.png, checkpoints/, drafter/}; use a trained drafter with
scripts/generate.py --config.drafter=<kind> --config.draft_model=output_dir/<kind>/drafter.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from specjax.training.pipeline import run  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", "configs/train_feature_head.py", "training config")


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO
  summary = run(_CONFIG.value)
  for kind, metrics in summary["drafters"].items():
    print(f"{kind}: tokens per round (greedy, K={metrics['k']}) {metrics['acceptance_before']:.2f} -> "
          f"{metrics['acceptance_after']:.2f}; held-out KL {metrics.get('heldout_kl', float('nan')):.3f}; "
          f"trained {metrics['train_steps']} steps in {metrics['train_time_s']:.0f} s")
  print(json.dumps({"metrics": os.path.join(_CONFIG.value.output_dir, "metrics.json"),
                    "total_time_s": round(summary["total_time_s"], 1),
                    "peak_resident_gib": round(summary["peak_resident_gib"], 2)}))


if __name__ == "__main__":
  app.run(main)
