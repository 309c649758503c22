"""Compile the draft step, the K+1 verify and the autoregressive step for a TPU topology (no TPU needed), write
aot.json and aot.md with per-device memory, FLOPs, bytes, collectives, rooflines and predicted ms/token.

  pip install -e '.[tpu]'
  python scripts/aot_compile.py --config=configs/chinchilla_70b_4b.py [--topology=v4:2x2x2] [--mesh=1x8]
  python scripts/aot_compile.py --config=... --measured=results/bench_cpu/results.json   # check the predictor
  python scripts/aot_compile.py --config=configs/llama3_8b_int8_self.py --tree_nodes=4,8,16,32   # tree drafts
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "experiment config (configs/chinchilla_70b_4b.py, ...)")
_TOPOLOGY = flags.DEFINE_string("topology", "", "TPU topology such as v4:2x2x4; default: the config's")
_MESH = flags.DEFINE_string("mesh", None, "DATAxMODEL over the topology's chips; default: the config's, or 1xN "
                            "when --topology changes the chip count")
_OUTPUT = flags.DEFINE_string("output_dir", "", "where aot.json and aot.md go; default: the config's output_dir")
_TREE_NODES = flags.DEFINE_list("tree_nodes", None, "node budgets N: compile the tree verify of StaticTree.balanced(N) "
                                "and predict tree drafts; default: the config's tree_nodes (none)")
_MEASURED = flags.DEFINE_string("measured", "", "a benchmark results.json: compare the predictor with its speedups")


def main(argv):
  del argv
  from specjax.aot import measured, report
  from specjax.aot.run import run_aot
  from specjax.aot.settings import settings_from_config
  from specjax.aot.topology import parse_topology
  config = _CONFIG.value
  mesh = _MESH.value
  if mesh is None and _TOPOLOGY.value and _TOPOLOGY.value != config.topology:
    mesh = ""  # the config's mesh was laid out for its own topology
  tree_nodes = None if _TREE_NODES.value is None else [int(n) for n in _TREE_NODES.value]
  settings = settings_from_config(config, topology=_TOPOLOGY.value, mesh=mesh, tree_nodes=tree_nodes)
  parse_topology(settings.topology)  # a clear error before anything slow
  result = run_aot(settings)
  if _MEASURED.value:
    rows = measured.compare_with_measured(measured.load_results(_MEASURED.value))
    result["measured_comparison"] = {"path": _MEASURED.value, "rows": rows, "summary": measured.summarize(rows)}
  output_dir = _OUTPUT.value or config.get("output_dir", "results/aot")
  json_path, md_path = report.write_outputs(result, output_dir)
  spec = result["predicted_ms_per_token_spec"][str(settings.k)]
  print(f"fits_hbm={result['fits_hbm']}  AR {result['predicted_ms_per_token_ar']:.3g} ms/token  "
        f"speculative K={settings.k} {spec:.3g} ms/token at alpha={settings.acceptance_rate}  -> {md_path}, "
        f"{json_path}")
  for row in result.get("trees", {}).get("rows", []):
    best = {rate: entry["best"]["speedup"] for rate, entry in row["by_sibling_rate"].items()}
    print(f"tree N={row['n']}: verify {row['verify_ms']:.3g} ms ({row['verify_ratio']:.2f} steps; chain K={row['n']} "
          f"{row['chain_verify_ratio']:.2f}), speedup "
          + ", ".join(f"{speedup:.2f}x at sibling rate {rate}" for rate, speedup in best.items())
          + f"; best chain K={row['best_chain_k']} {row['best_chain_speedup']:.2f}x")
  if not result["fits_hbm"]:
    print(f"WARNING: {report.format_bytes(result['resident_bytes_per_device'])} per device exceeds the "
          f"{report.format_bytes(result['hbm_bytes_per_device'])} of HBM", file=sys.stderr)


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])
  app.run(main)
