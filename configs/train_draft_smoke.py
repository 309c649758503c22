"""Every trainable drafter for a few steps on SmolLM2-135M, end to end (corpus, checkpoints, acceptance before
and after, export, metrics.json) in a few minutes on a 2-core CPU. CI runs it:

  python scripts/train_draft.py --config=configs/train_draft_smoke.py --config.output_dir=/tmp/train-smoke
"""

from configs import train_feature_head


def get_config():
  c = train_feature_head.get_config()
  c.drafters = ("feature_head", "medusa", "layer_skip", "draft_model", "block_drafter")
  c.output_dir = "results/train/smoke"
  c.corpus_cache_dir = ""          # made afresh (and small) every run
  c.corpus = dict(n_prompts=2, max_new_tokens=16, generate_batch=2, temperature=0.0, stdlib_sequences=6,
                  seq_len=64, heldout_fraction=0.25, seed=0)
  c.train = dict(steps=3, batch_size=2, learning_rate=1e-3, warmup_steps=1, checkpoint_every=2, log_every=1,
                 eval_every=0)
  c.eval = dict(categories=("prose",), prompts_per_category=2, max_new_tokens=8, k=4)  # batch 2 like the corpus:
                                   # the no-feature prefill program is shared
  for kind in c.drafters:
    c[kind].train = dict()         # every drafter runs the few steps above
  c.feature_head.draft_vocab_size = 1024
  c.medusa.draft_vocab_size = 1024
  c.layer_skip.n_layers = 2
  c.layer_skip.loss_vocab_size = 1024
  c.draft_model.loss_vocab_size = 1024
  c.draft_model.init = "truncate:2"
  c.block_drafter.draft_vocab_size = 1024
  return c
