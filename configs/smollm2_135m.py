"""Generate from the embedded SmolLM2-135M-Instruct: autoregressive and speculative, with tokens/s."""

import ml_collections


def get_config():
  config = ml_collections.ConfigDict()
  config.model = "smollm2-135m"      # a .gguf file, a Hugging Face directory, a save_model directory, or a name
  config.dtype = ""                  # "" keeps the checkpoint's dtype; "float32" or "bfloat16"
  # One request (batch 1); more prompts are a batch: --config.prompts='("first prompt", "second prompt")'
  config.prompts = ("Write a Python function that checks whether a string is a palindrome.",)
  config.chat = True
  config.max_new_tokens = 128
  config.temperature = 0.0
  config.top_k = 0
  config.top_p = 1.0
  config.seed = 0
  config.drafter = "quantized"       # "none", "prompt_lookup", "draft_model", "layer_skip", "medusa", "feature_head",
  #                                    "quantized", "block_drafter"
  # draft_model: a model source or truncate:N (the target's first N layers); layer_skip: N or a trained directory;
  # quantized: q4 or int8 (the target's own weights quantized) or a .gguf file (its Q4_0 / Q4_1 / Q8_0 blocks);
  # medusa / feature_head / block_drafter: a directory written by scripts/train_draft.py
  # (output_dir/<kind>/drafter).
  config.draft_model = "q4"          # the source of the drafter (below); for draft_model e.g. truncate:8
  config.k = 4
  config.tree = ""                   # "" (a chain of K), "dynamic:N,DEPTH,TOP_K" (EAGLE-2) or "static:N,WIDTH"
  config.adaptive = False            # True: k="auto", the adaptive SpeculationPolicy (K per round, 0 when it does not pay)
  config.compare_autoregressive = True
  config.repeats = 3                 # timed calls per run, alternated between autoregressive and speculative
  config.mesh = ""                   # "" (one device) or "DATAxMODEL", e.g. "2x4"
  return config
