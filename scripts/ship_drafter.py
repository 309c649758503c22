"""Ship a trained drafter inside the package (bfloat16, under 20 MiB), so `--config.drafter_dirs.<kind>=shipped`
works without training first; records the training command and the tokens per round of the shipped copy.

  python scripts/ship_drafter.py --drafter_dir=results/train/feature_head/feature_head/drafter \
      --command="python scripts/train_draft.py --config=configs/train_feature_head.py ..."
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags, logging  # noqa: E402

from specjax.cli import model_from_source  # noqa: E402
from specjax.drafters.shipped import ROOT  # noqa: E402
from specjax.training.ship import ship_drafter  # noqa: E402

_DRAFTER_DIR = flags.DEFINE_string("drafter_dir", None, "a drafter directory that scripts/train_draft.py wrote")
_COMMAND = flags.DEFINE_string("command", None, "the command that trained it (recorded in the manifest)")
_MODEL = flags.DEFINE_string("model", "smollm2-135m", "the target it was trained for (a known model name)")
_ROOT = flags.DEFINE_string("root", ROOT, "where shipped drafters live")
_PROMPTS = flags.DEFINE_integer("prompts_per_category", 2, "held-out benchmark prompts per category to measure on")


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  target = model_from_source(_MODEL.value)
  entry = ship_drafter(_DRAFTER_DIR.value, target, _MODEL.value, _COMMAND.value, _ROOT.value,
                       prompts_per_category=_PROMPTS.value)
  print(json.dumps(entry, indent=1))


if __name__ == "__main__":
  flags.mark_flags_as_required(["drafter_dir", "command"])
  app.run(main)
