"""Never slower: the adaptive policy (k="auto", K from {1, 2, 4} or plain autoregressive steps, every round)
against autoregressive decoding at batch 1, 4 and 16 and temperatures 0 and 1, every category, with prompt lookup
(the drafter whose acceptance swings most between categories: it pays on some prompts and not on others). The
fixed-K cells of the same drafter are in configs/bench_cpu.py.

python scripts/benchmark.py --config=configs/bench_policy.py
"""

from configs import bench_cpu


def get_config():
  c = bench_cpu.get_config()
  c.methods = ("ar", "prompt_lookup")
  c.ks = ()                        # no fixed K: the adaptive cells only
  c.auto_ks = (1, 2, 4)
  c.batch_sizes = (1, 4, 16)
  c.temperatures = (0.0, 1.0)
  c.sweep = "grid"
  c.phase_split_batch_sizes = ()
  c.prompts_per_category = 2       # rows cycle over them: a batch of 16 holds each prompt 8 times
  c.max_new_tokens = 32
  c.repeats = 2                    # every call twice: the ratios sit within a few percent of 1, like the noise
  c.paired_with_ar = True          # and an autoregressive call beside each: paired_speedup_vs_ar
  c.prompt_bucket = 256            # one prompt shape for every category: one compilation per cell
  c.output_dir = "results/bench_policy"
  return c
