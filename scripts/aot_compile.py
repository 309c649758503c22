"""Compile the draft step, the K+1 verify and the autoregressive step for a TPU topology (no TPU needed), write
aot.json and aot.md with per-device memory, FLOPs, bytes, collectives, rooflines and predicted ms/token.

  pip install -e '.[tpu]'
  python scripts/aot_compile.py --config=configs/chinchilla_70b_4b.py [--topology=v4:2x2x2] [--mesh=1x8]
  python scripts/aot_compile.py --config=... --measured=results/bench_cpu/results.json   # check the predictor
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
  settings = settings_from_config(config, topology=_TOPOLOGY.value, mesh=mesh)
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
  if not result["fits_hbm"]:
    print(f"WARNING: {report.format_bytes(result['resident_bytes_per_device'])} per device exceeds the "
          f"{report.format_bytes(result['hbm_bytes_per_device'])} of HBM", file=sys.stderr)


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])
  app.run(main)
