"""Train an EAGLE-3 style feature head for SmolLM2-135M (the other train_* configs start from this one).

  python scripts/train_draft.py --config=configs/train_feature_head.py

The corpus (on-policy text the target writes for specjax.training.prompt_pool, plus standard-library docstrings,
with the target's features) is cached in corpus_cache_dir and shared by every config with the same corpus
section. Writes output_dir/metrics.json (acceptance_before / acceptance_after: mean tokens per round, greedy, K=4,
on the benchmark's held-out prompts), metrics.jsonl, curves.png, checkpoints/ (resumed when rerun) and the trained
drafter/.
"""

import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.model = "smollm2-135m"        # a known model name, a checkpoint path, or random:NAME
  c.dtype = ""                     # "" keeps the checkpoint's dtype (float32 for the GGUF)
  c.drafters = ("feature_head",)   # any of feature_head, medusa, layer_skip, draft_model, block_drafter
  c.seed = 0
  c.output_dir = "results/train/feature_head"
  c.corpus_cache_dir = "results/train/corpus"
  c.compilation_cache_dir = "~/.cache/specjax/jax-cache"
  c.export_dtype = ""              # e.g. "bfloat16" to halve the exported drafter
  c.corpus = dict(n_prompts=400, max_new_tokens=112, generate_batch=50, temperature=0.0, stdlib_sequences=64,
                  seq_len=176, heldout_fraction=0.1, seed=0,
                  # sequences from the packaged text corpus (scripts/build_corpus.py), e.g. text_sequences=4000
                  text_corpus="data/corpus", text_sequences=0,
                  # the target's answers to passage + instruction prompts (long-context style), e.g. 480
                  passage_prompts=0,
                  # the target's answers to prose, code and JSON/CSV tasks made from packaged text, e.g. 4000
                  task_prompts=0,
                  # ... and to everyday prose prompts (messages, why-and-how questions, stories, tips), e.g. 2400
                  everyday_prompts=0,
                  # ... and to requests the target writes itself from its chat template (Magpie), e.g. 2400
                  self_prompts=0,
                  # ... and to passages of 120-450 words (docstring runs, Wikipedia leads), packed apart to
                  # long_seq_len: the benchmark's long-context length, past seq_len; e.g. 480
                  long_passage_prompts=0, long_seq_len=832,
                  # "bfloat16": the feature pass's large products on bfloat16 operands, 2x on an AMX CPU
                  feature_gemm="float32")
  # Shared optimisation settings; each drafter's own `train` entry below overrides them for that drafter.
  # on_policy_repeats: each of the target's own answers comes this many times an epoch (weighted up against text).
  # bf16_gemm: the step's large products on bfloat16 operands, float32 sums (1.6x a feature-head step on AMX).
  # long_every: every N-th step reads long_batch_size rows of the long passages' answers instead (0: never).
  c.train = dict(steps=300, batch_size=4, learning_rate=1e-3, warmup_steps=30, end_lr_fraction=0.1,
                 weight_decay=0.01, clip_norm=1.0, seed=0, checkpoint_every=50, keep_checkpoints=2, log_every=10,
                 eval_every=100, on_policy_repeats=1, bf16_gemm=False, long_every=0, long_batch_size=2)
  c.eval = dict(categories=("prose", "code"), prompts_per_category=10, max_new_tokens=64, k=4)
  # feature_layers () = low, middle, high (2, n/2, n-3); draft_vocab_size: the most frequent corpus tokens the
  # head proposes among (0 = all); ttt_steps: draft steps unrolled in training (training-time test); n_layers:
  # decoder layers (EAGLE-3's one by default); top1_weight: cross-entropy with the target's argmax beside the KL, at
  # every draft step (the greedy acceptance's surrogate; 1.0 gave held-out top-1 +0.007 and the same prose tokens a
  # round, docs/results.md section 51).
  c.feature_head = dict(feature_layers=(), n_layers=1, ffn_dim=0, draft_vocab_size=8192, ttt_steps=3, step_decay=0.8,
                        feature_weight=0.0, top1_weight=0.0, train=dict(learning_rate=3e-3, batch_size=6))
  c.medusa = dict(n_heads=4, draft_vocab_size=8192, step_decay=0.8, train=dict())
  # loss_vocab_size: the KL of a full-vocabulary drafter is taken over the most frequent tokens (the head's
  # matmul over all 49152 would dominate the step).
  c.layer_skip = dict(n_layers=0, adapter_rank=256, loss_vocab_size=8192,  # n_layers 0: a quarter of the depth
                      train=dict(batch_size=8))
  c.draft_model = dict(init="truncate:4", train_embeddings=False, loss_vocab_size=8192,
                       train=dict(steps=200, learning_rate=5e-4))
  # block_drafter (DFlash style, configs/train_block_drafter.py): n_layers decoder layers; block_size B, the trained
  # block (drafts up to B - 1 a round); anchors: blocks per sequence in one forward; gamma: position weights
  # exp(-(j - 1) / gamma) along the block; ce_weight / kl_weight: cross-entropy with the true token (DFlash) and KL
  # to the target's distribution at each position.
  # start_from_target: the decoder blocks start as the target's last n_layers layers, the context as the target's
  # own keys and values there (BlockDrafter.started_from_target). previous_feature: the block's first input also
  # holds the fused features of the position before it, as an EAGLE head's does.
  # anchors 64 with the KL: held-out top-1 at block position 1 0.215 after 400 steps, against 0.136 with 16 anchors
  # and cross-entropy alone (docs/results.md section 32).
  c.block_drafter = dict(feature_layers=(), n_layers=2, ffn_dim=0, draft_vocab_size=8192, block_size=8, gamma=4.0,
                         anchors=64, ce_weight=1.0, kl_weight=1.0, start_from_target=False,
                         previous_feature=False,
                         train=dict(learning_rate=3e-3, batch_size=6))
  # init_from: a saved drafter's directory (a training run's output_dir/<kind>/drafter) or "shipped" (the package's
  # own); training goes on from it (its architecture and draft vocabulary; the kind's settings must match them).
  for kind in ("feature_head", "medusa", "layer_skip", "draft_model", "block_drafter"):
    c[kind].init_from = ""
  return c
