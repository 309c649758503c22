"""Chen et al. (2023), "Accelerating Large Language Model Decoding with Speculative Sampling" (arXiv:2302.01318):
Chinchilla-70B target, 4B draft, 16 TPU v4 chips, batch 1, K=4.

  python scripts/aot_compile.py --config=configs/chinchilla_70b_4b.py            # 16 chips: v4:2x2x4
  python scripts/aot_compile.py --config=configs/chinchilla_70b_4b.py --topology=v4:2x2x2   # 8 chips = 16 TensorCores

specjax's decoder is Llama-shaped (RMSNorm, RoPE, SwiGLU); where Chinchilla differs, the choice below keeps
what decode time depends on (bytes of weights and KV cache read per step, FLOPs per token) at Chinchilla's values.
"""

import ml_collections

# Hoffmann et al. (2022), "Training Compute-Optimal Large Language Models", Table 4 (Chinchilla row):
# 80 layers, d_model 8192, 64 heads, key/value size 128, 70B parameters. Vocabulary: 32,000 SentencePiece tokens
# (Rae et al. 2021, Gopher, Section 3; Chinchilla uses Gopher's setup). Context 2048 (both papers' training length).
TARGET = dict(
    vocab_size=32000,
    d_model=8192,
    n_layers=80,
    n_heads=64,
    n_kv_heads=64,        # multi-head attention (Chinchilla predates grouped-query attention): 64 K/V heads
    head_dim=128,         # Table 4 "kv size" 128
    # Table 4's feed-forward is 4 x d_model with two matrices (Gopher's MLP). A SwiGLU MLP has three: a width of
    # 4 x d_model would give 86.4B parameters. Chosen: 3 x d_model = 24576, which gives 70.3B parameters in total,
    # the published 70B, so the weight bytes a decode step reads are Chinchilla's.
    ffn_dim=24576,
    max_seq_len=2048,
    tie_embeddings=False,  # not stated in either paper; untied costs 0.26B parameters (0.4% of 70B)
    rope_theta=10000.0,    # Chinchilla uses relative position encodings; RoPE has the same per-step cost
    dtype="bfloat16",      # Chen et al. serve in bf16 on TPU v4
)

# Chen et al. 2023, Section 3: a 4B-parameter draft "with a slightly smaller width and with only 8 layers", same
# tokenizer (so the same 32,000 vocabulary). Width not given: chosen d_model 6144 (48 heads of 128, a width the
# 16-chip model axis divides) and SwiGLU width 16384 (8/3 x d_model, the usual SwiGLU ratio), giving 4.02B.
DRAFT = dict(TARGET, d_model=6144, n_layers=8, n_heads=48, n_kv_heads=48, ffn_dim=16384)


def get_config():
  c = ml_collections.ConfigDict()
  c.target = TARGET
  c.draft = DRAFT
  # "16 TPU v4" (Chen et al. Section 3) read as 16 chips: topology 2x2x4 (a v4-32 slice, 4 hosts). JAX runs each v4
  # chip as one device (megacore). Both models are split 16 ways over "model" (Megatron: heads, FFN width and
  # vocabulary per chip, two all-reduces per layer); batch 1 leaves nothing for "data".
  c.topology = "v4:2x2x4"
  c.mesh = "1x16"
  c.batch_size = 1
  c.k = 4                        # Chen et al. Table 1: K = 4
  c.ks = (1, 2, 3, 4, 5, 6, 7, 8)
  c.compile_ks = (4,)            # verify programs compiled; other K are interpolated (affine in positions)
  c.cache_len = 2048             # Chinchilla's context
  c.context_len = 1024           # assumed: an XSum document plus its summary fills about half of it
  c.acceptance_rate = 0.8        # assumed for the K sweep; the paper-implied rates are in the comparison table
  c.temperature = 1.0
  c.top_k = 0
  c.top_p = 1.0
  c.paper = dict(
      source="Chen et al. 2023, arXiv:2302.01318, Table 1 (ms/token, speedup) and Section 3 (draft 1.8 ms/token)",
      ar_ms_per_token=14.1,
      draft_ms_per_token=1.8,
      rows=[dict(task="XSum, nucleus", ms_per_token=7.52, speedup=1.92),
            dict(task="XSum, greedy", ms_per_token=7.00, speedup=2.01),
            dict(task="HumanEval, nucleus", ms_per_token=5.73, speedup=2.46)],
  )
  c.output_dir = "results/aot/chinchilla_70b_4b"
  return c
