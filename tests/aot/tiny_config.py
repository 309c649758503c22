"""A tiny target / draft pair for AOT tests on the smallest v4 slice (v4:2x2x1, 4 chips): seconds to compile."""

import ml_collections

TARGET = dict(vocab_size=1024, d_model=256, n_layers=2, n_heads=4, n_kv_heads=4, ffn_dim=512, max_seq_len=512,
              tie_embeddings=False, dtype="bfloat16")
DRAFT = dict(TARGET, d_model=128, n_layers=1, ffn_dim=256)


def get_config():
  c = ml_collections.ConfigDict()
  c.target = TARGET
  c.draft = DRAFT
  c.topology = "v4:2x2x1"
  c.mesh = "1x4"
  c.batch_size = 1
  c.k = 4
  c.ks = (1, 2, 3, 4, 5, 6, 7, 8)
  c.compile_ks = (4,)
  c.cache_len = 256
  c.context_len = 128
  c.acceptance_rate = 0.8
  c.temperature = 1.0
  c.top_k = 0
  c.top_p = 1.0
  c.paper = dict(source="synthetic", ar_ms_per_token=14.1, draft_ms_per_token=1.8,
                 rows=[dict(task="row", ms_per_token=7.0, speedup=2.01)])
  c.output_dir = ""
  return c


def with_changes(**changes) -> ml_collections.ConfigDict:
  """This config with some fields changed (or added), as the tests vary it."""
  c = get_config()
  for key, value in changes.items():
    c[key] = value
  return c
