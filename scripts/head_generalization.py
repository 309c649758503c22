"""Teacher-forced agreement of a trained feature head with the target on prose prompts it trained on, on prompts
with a new template or a new subject or both, and on the benchmark's prose (specjax.training.generalization).

  python scripts/head_generalization.py --drafter_dir=shipped --output=results/generalization.json
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags, logging  # noqa: E402

from specjax.cli import model_from_source  # noqa: E402
from specjax.drafters.shipped import SHIPPED, shipped_directory  # noqa: E402
from specjax.training.export import load_drafter  # noqa: E402
from specjax.training.files import write_json  # noqa: E402
from specjax.training.generalization import agreement  # noqa: E402

_DRAFTER_DIR = flags.DEFINE_string("drafter_dir", SHIPPED, "a feature head's directory, or 'shipped'")
_MODEL = flags.DEFINE_string("model", "smollm2-135m", "the target (a known model name or a checkpoint path)")
_PROMPTS = flags.DEFINE_integer("prompts", 10, "prompts per set (at most 10)")
_OUTPUT = flags.DEFINE_string("output", "", "also write the report here as JSON")


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  target = model_from_source(_MODEL.value)
  directory = _DRAFTER_DIR.value
  head = load_drafter(shipped_directory("feature_head", target.config) if directory == SHIPPED else directory, target)
  report = agreement(target, head, n=_PROMPTS.value)
  for name, row in report.items():
    print(f"{name:32s} top-1 at draft steps 1-3 {' / '.join(f'{t:.3f}' for t in row['top1'])}   "
          f"KL at step 1 {row['kl_1']:.3f}   ({row['prompts']} prompts)")
  if _OUTPUT.value:
    os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
    write_json(_OUTPUT.value, report)


if __name__ == "__main__":
  app.run(main)
