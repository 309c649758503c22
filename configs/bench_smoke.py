"""Every code path on the real SmolLM2-135M in a few minutes on a 2-core CPU: all methods, two batch sizes, two K,
every category, the phase-split mode. Temperature 0 only (sampling paths are covered by tests/benchmark). One
prompt bucket for the whole run, so each cell compiles one program. The Medusa and feature heads are untrained
here (their code path, not their acceptance: train them with scripts/train_draft.py for that).

python scripts/benchmark.py --config=configs/bench_smoke.py
"""

from configs import bench_cpu


def get_config():
  c = bench_cpu.get_config()
  c.methods = ("ar", "draft_model", "prompt_lookup", "layer_skip", "medusa", "feature_head")
  c.ks = (2, 4)
  c.auto_ks = ()                   # the adaptive policy is tested in tests/test_policy.py; the full run measures it
  c.batch_sizes = (1, 2)
  c.temperatures = (0.0,)
  c.sweep = "smoke"                # every method at K=2, batch 1; draft_model also at K=4, batch 2
  c.drafter_dirs.medusa = "untrained"
  c.drafter_dirs.feature_head = "untrained"
  c.drafter_dirs.layer_skip = ""   # the target's first layer_skip_layers layers and its head
  c.layer_skip_layers = 2
  c.phase_split_batch_sizes = (1,)
  c.phase_split_methods = ("ar", "prompt_lookup")  # the mode's code path once (the tiny test runs it for all)
  c.prompts_per_category = 1
  c.max_new_tokens = 8
  c.prompt_bucket = 256            # all categories share one shape (the two shortest long-context prompts fit)
  c.draft_layers = 2
  c.peers = ""                     # the HF peer: add --config.peers=hf (about 6 more minutes here)
  c.output_dir = "results/bench_smoke"
  return c
