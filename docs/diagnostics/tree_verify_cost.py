"""The paired cost of verifying a token tree on SmolLM2-135M against a one-position step, N in {4, 8, 16, 32}, and
the chain of as many positions beside it (docs/results.md section 16): `benchmark.verify_cost.paired_verify_cost`,
batch 1, 100 cached positions, 30 alternated pairs each.

  python docs/diagnostics/tree_verify_cost.py
"""
from specjax.benchmark.verify_cost import paired_verify_cost
from specjax.cli import model_from_source
from specjax.trees import StaticTree

target = model_from_source("smollm2-135m")
for n in (4, 8, 16, 32):
  chain = paired_verify_cost(target, batch=1, k=n, filled=100, cache_size=256, calls=30)
  tree = paired_verify_cost(target, batch=1, k=n, filled=100, cache_size=256, calls=30,
                            tree=StaticTree.balanced(n, width=4))
  print(f"N={n:2d}: tree {tree['ratio']:.2f}x a {tree['step_ms']:.1f} ms step, chain of {n} {chain['ratio']:.2f}x "
        f"({chain['step_ms']:.1f} ms step)", flush=True)
