"""The quantized self-draft (issue 18) on SmolLM2-135M: the target's own weights as q4 (q4_1 linears, q8_0
embedding: on SmolLM2 exactly the GGUF's own blocks, llama.cpp's draft) and int8 drafts against autoregressive
decoding, greedy and temperature 1, K 2 and 4, batch 1 and 2, every category; paired calls and
phase split at batch 1 (draft cost c, verification cost against one position).

  python scripts/benchmark.py --config=configs/bench_quantized.py [--config.peers=llama_cpp \\
      --config.llama_cpp_dir=build/llama.cpp/cmake/bin]      # bash scripts/build_llama_cpp.sh builds it
"""

from configs import bench_cpu


def get_config():
  c = bench_cpu.get_config()
  c.methods = ("ar", "quantized:q4", "quantized:int8")
  c.ks = (2, 4)
  c.auto_ks = (1, 2, 4)
  c.batch_sizes = (1, 2)
  c.temperatures = (0.0, 1.0)
  c.sweep = "axes"
  c.phase_split_batch_sizes = (1,)
  c.prompts_per_category = 2
  c.max_new_tokens = 64
  c.prompt_bucket = 0
  c.paired_with_ar = True
  c.paired_verify_calls = 10
  c.output_dir = "results/bench_quantized"
  return c
