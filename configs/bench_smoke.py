"""Every code path on the real SmolLM2-135M in a few minutes on a 2-core CPU: all methods, two batch sizes, two K,
every category, the phase-split mode and the HF peer (when installed). Temperature 0 only (sampling paths are
covered by tests/benchmark). One prompt bucket for the whole run, so each cell compiles one program.

python scripts/benchmark.py --config=configs/bench_smoke.py
"""

from configs import bench_cpu


def get_config():
  c = bench_cpu.get_config()
  c.ks = (2, 4)
  c.auto_ks = ()                   # the adaptive policy is tested in tests/test_policy.py; the full run measures it
  c.batch_sizes = (1, 2)
  c.temperatures = (0.0,)
  c.sweep = "axes"                 # K in (2, 4) at batch 1, batch 2 at K=2
  c.phase_split_batch_sizes = (1,)
  c.prompts_per_category = 2
  c.max_new_tokens = 16
  c.prompt_bucket = 256            # all categories share one shape (the two shortest long-context prompts fit)
  c.draft_layers = 2
  c.peers = ""                     # the HF peer: add --config.peers=hf (about 6 more minutes here)
  c.output_dir = "results/bench_smoke"
  return c
