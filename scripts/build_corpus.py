"""Build the drafters' training corpus from packaged text (chat, prose, code, structured), tokenized for the target.

  python scripts/build_corpus.py --config=configs/build_corpus.py [--config.out_dir=data/corpus]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", "configs/build_corpus.py", "corpus config")


def main(argv):
  del argv
  from specjax.cli import model_from_source
  from specjax.training.text_corpus import CorpusPlan, build
  c = _CONFIG.value
  plan = CorpusPlan(budgets=dict(c.budgets), out_dir=c.out_dir, roots=dict(c.roots), shard_tokens=c.shard_tokens,
                    max_doc_tokens=c.max_doc_tokens)
  tokenizer = model_from_source(c.model, "").tokenizer
  if tokenizer is None:
    raise ValueError(f"model {c.model!r} has no tokenizer; the corpus is tokenized with the target's own")
  manifest = build(plan, tokenizer)
  print(f"{manifest['tokens']:,} tokens in {c.out_dir} ({manifest['tokens_by_kind']}); manifest.json written")


if __name__ == "__main__":
  app.run(main)
