"""A Llama-3-8B target with a Llama-3.2-1B draft (same 128,256-token vocabulary) on a TPU v5e slice.

  python scripts/aot_compile.py --config=configs/llama3_8b_1b.py [--topology=v4:2x2x1]
"""

import ml_collections

# meta-llama/Llama-3.1-8B config.json: hidden 4096, 32 layers, 32 heads, 8 KV heads, intermediate 14336,
# vocab 128256, rope_theta 500000, llama3 rope scaling (factor 8, low 1, high 4, original 8192), untied head.
TARGET = dict(
    vocab_size=128256, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim=14336, max_seq_len=131072,
    rope_theta=500000.0, rope_scaling=(8.0, 1.0, 4.0, 8192), tie_embeddings=False, dtype="bfloat16",
    eos_token_ids=(128001, 128008, 128009), bos_token_id=128000)

# meta-llama/Llama-3.2-1B config.json: hidden 2048, 16 layers, 32 heads of 64, 8 KV heads, intermediate 8192,
# rope scaling factor 32, tied embeddings: 1.24B parameters.
DRAFT = dict(TARGET, d_model=2048, n_layers=16, head_dim=64, ffn_dim=8192, rope_scaling=(32.0, 1.0, 4.0, 8192),
             tie_embeddings=True)


def get_config():
  c = ml_collections.ConfigDict()
  c.target = TARGET
  c.draft = DRAFT
  c.topology = "v5e:2x2"   # a v5litepod-4 serving slice: 4 chips of 16 GB; 4.6 GB of weights per chip
  c.mesh = "1x4"           # 4-way tensor parallel: 32 heads, 8 KV heads, FFN and vocabulary all divide by 4
  c.batch_size = 1
  c.k = 4
  c.ks = (1, 2, 3, 4, 5, 6, 7, 8)
  c.compile_ks = (4,)
  c.cache_len = 4096
  c.context_len = 2048
  c.acceptance_rate = 0.7  # assumed; measure it for your prompts with scripts/benchmark.py
  c.temperature = 1.0
  c.top_k = 0
  c.top_p = 1.0
  c.output_dir = "results/aot/llama3_8b_1b"
  return c
