"""The full CPU benchmark on SmolLM2-135M: every method, K 1..8, batch 1..16, temperatures 0 and 1, every category.

python scripts/benchmark.py --config=configs/bench_cpu.py [--config.peers=hf] [--config.output_dir=...]
Hours on a 2-core CPU (one compilation per cell and prompt bucket); narrow it with --config.ks='(2,4)' etc.
"""

import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.model = "smollm2-135m"        # a known model name, a .gguf file, an HF or specjax directory, or "random"
  c.dtype = ""                     # "" keeps the checkpoint's dtype (float32 for GGUF)
  c.weights = "float"              # the target's weights: "float", or "q4" / "int8" (load_model's quantized target;
                                   # the llama.cpp peer then runs the file itself / its Q8_0 copy as its target)
  c.random_model = ml_collections.ConfigDict(dict(vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                                                  ffn_dim=128, max_seq_len=1024))  # used when model == "random"
  c.methods = ("ar", "draft_model", "prompt_lookup", "layer_skip")  # + "medusa", "feature_head", ... once trained
  # Trained drafters (scripts/train_draft.py writes output_dir/<kind>/drafter; configs/bench_drafters.py uses them);
  # "" = the default for draft_model (the target's first draft_layers layers) and layer_skip (its first
  # layer_skip_layers layers and head, no adapter); "untrained" = a freshly initialised head (times the code path).
  c.drafter_dirs = ml_collections.ConfigDict(dict(draft_model="", layer_skip="", medusa="", feature_head="",
                                                  block_drafter=""))
  c.categories = ("code", "prose", "structured", "long_context")
  c.ks = (1, 2, 3, 4, 6, 8)        # fixed K; () runs only the adaptive cells (needs auto_ks)
  c.auto_ks = (1, 2, 4)            # the adaptive policy's candidate K (k="auto" cells); () = no adaptive cells
  c.batch_sizes = (1, 2, 4, 8, 16)
  c.temperatures = (0.0, 1.0)
  c.sweep = "grid"                 # "grid": every K at every batch size; "axes": K sweep at the first batch size,
                                   # batch sweep at the first K (fewer compilations)
  c.phase_split_batch_sizes = (1, 2, 4, 8, 16)  # batch sizes that also run the phase-split mode
  c.phase_split_methods = ()       # methods that run it there (() = all; "ar" is the baseline theory divides by)
  c.paired_verify_calls = 0        # > 0: at those batch sizes, each K and category, this many alternated pairs of a
                                   # one-position and a K+1-position target call (report.md: verification cost)
  c.tree_nodes = ()                # token-tree cells: a DynamicTree of each N here per tree method, at the first
                                   # batch size, beside the chains (and, with paired_verify_calls, the paired cost
                                   # of verifying N nodes against a step, at the first phase-split batch size)
  c.tree_kind = "dynamic"          # "dynamic": DynamicTree(N, tree_depth, tree_top_k); "static":
                                   # StaticTree.balanced(N, width=tree_top_k) (every round the same shape);
                                   # "tuned": per method, the static tree of N nodes (tree_depth deep at most,
                                   # ranks below tree_top_k) with the most expected tokens at the acceptance per
                                   # depth and rank it measured on the calibration prompts (specjax.trees.tune);
                                   # "fastest": per method, the tree of at most N nodes (a chain where no branch
                                   # pays) fastest at that acceptance and this machine's measured round costs
                                   # (benchmark.round_costs, trees.fastest)
  c.tree_calibration_prompts = 2   # "tuned", "fastest": prompts a category after the measured ones, drafted with a comb
  c.tree_per_category = False      # "tuned", "fastest": one tree per method and category, calibrated on its own
  c.tree_depth = 5                 # the dynamic trees' depth (at most N) and children per expanded node
  c.tree_top_k = 4
  c.tree_branching = "sample"      # "top_k" (each context's top choices) or "sample" (drawn from q)
  c.tree_methods = ()              # drafter methods that run tree cells (() = every one that branches)
  c.prompts_per_category = 8       # the first N prompts of each category; 0 = all (9-10 each)
  c.max_new_tokens = 64
  c.max_prompt_tokens = 0          # 0 = no cut; otherwise keep each prompt's last N tokens
  c.prompt_bucket = 0              # 0 = per-category power-of-two bucket; N = pad every prompt to at least N
  c.repeats = 1                    # timed repetitions of each call
  c.paired_with_ar = False         # also time an autoregressive call on the same inputs beside every drafter call
                                   # (paired_speedup_vs_ar: the ratio per pair, free of drift between cells)
  c.paired_reference = ""          # "METHOD@K" (a chain cell of this run): timed beside every other drafter cell
                                   # too, on the same inputs (paired_vs_reference: a tree against the best chain)
  c.draft_layers = 4               # draft_model = the target's first N layers
  c.layer_skip_layers = 0          # layer_skip without a trained adapter: the target's first N layers and head
                                   # (0: a quarter of its depth, 8 of SmolLM2-135M's 30)
  c.prompt_lookup_max_ngram = 3
  c.chat = True                    # apply the model's chat template to the prompts
  c.stop_at_eos = True
  c.execute_code = True            # run generated functions against the prompts' tests (specjax.benchmark.sandbox:
                                   # temp dir, scrubbed env, rlimits, guard, no network)
  c.peers = ""                     # "hf": also HF transformers generate (AR and prompt lookup) on the same file;
                                   # "llama_cpp": llama.cpp's f32 target alone and with the file's own blocks as
                                   # its draft (llama-completion, llama-speculative at each K), batch 1
  c.llama_cpp_dir = "build/llama.cpp/cmake/bin"  # the binaries bash scripts/build_llama_cpp.sh builds
  c.seed = 0
  c.output_dir = "results/bench_cpu"
  c.compilation_cache_dir = "~/.cache/specjax/jax-cache"  # "" = off; a rerun of the same command does not recompile
  return c
