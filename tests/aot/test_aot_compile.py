"""scripts/aot_compile.py on a tiny pair for v4:2x2x1: memory and cost fields present and positive, the target
really split over the model axis, predictions for every K, the markdown table written."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from specjax.config import ModelConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_config.py")

pytestmark = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                reason="needs libtpu: pip install -e '.[tpu]'")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
  out = tmp_path_factory.mktemp("aot")
  measured = out / "results.json"
  measured.write_text(json.dumps([
      {"method": "ar", "k": 0, "batch_size": 1, "category": "code", "temperature": 0.0,
       "verify_ms_per_round": 10.0, "accept_ms_per_round": 1.0, "speedup_vs_ar": 1.0},
      {"method": "draft_model", "k": 4, "batch_size": 1, "category": "code", "temperature": 0.0, "alpha": 0.8,
       "draft_ms_per_round": 4.0, "verify_ms_per_round": 12.0, "accept_ms_per_round": 2.0, "speedup_vs_ar": 1.9}]))
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  run = subprocess.run([sys.executable, "scripts/aot_compile.py", f"--config={CONFIG}", f"--output_dir={out}",
                        f"--measured={measured}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert run.returncode == 0, run.stderr[-3000:]
  assert "fits_hbm=True" in run.stdout
  with open(out / "aot.json") as f:
    result = json.load(f)
  return result, (out / "aot.md").read_text()


def test_every_program_has_positive_memory_and_cost_figures(outputs):
  result, _ = outputs
  assert set(result["programs"]) == {"draft_step", "ar_step", "verify_k4"}
  for name, figures in result["programs"].items():
    for field in ("argument_bytes", "output_bytes", "weight_bytes", "flops", "model_flops", "xla_bytes_accessed",
                  "roofline_bytes", "memory_ms", "compute_ms", "roofline_ms"):
      assert figures[field] > 0, (name, field)
    assert figures["temp_bytes"] >= 0 and figures["fits_hbm"] is True
    assert figures["peak_bytes"] <= result["hbm_bytes_per_device"]
  assert result["fits_hbm"] is True
  assert result["chip"]["name"] == "TPU v4" and result["n_devices"] == 4


def test_target_weights_are_split_over_the_model_axis(outputs):
  result, _ = outputs
  config = ModelConfig.from_dict(result["target"])
  total = config.param_count() * 2  # bf16
  per_device = result["programs"]["ar_step"]["weight_bytes"]
  assert per_device == result["weight_bytes_per_device"]["target"]
  assert abs(per_device / total - 1 / 4) < 0.01  # everything but the (replicated) norms is split 4 ways
  verify = result["programs"]["verify_k4"]
  ar = result["programs"]["ar_step"]
  assert verify["model_flops"] > 4 * ar["model_flops"]  # 5 positions instead of 1
  assert verify["flops"] > ar["flops"]
  # Megatron layers: two all-reduces per layer over the 4 chips of the model axis.
  assert verify["collectives"]["all-reduce"]["count"] >= 2 * config.n_layers


def test_predictions_for_every_k_at_the_stated_rate(outputs):
  result, markdown = outputs
  assert result["acceptance_rate"] == 0.8 and result["predicted_ms_per_token_ar"] > 0
  spec = result["predicted_ms_per_token_spec"]
  assert sorted(spec, key=int) == [str(k) for k in range(1, 9)]
  assert result["verify_by_k"]["4"]["interpolated"] is False and result["verify_by_k"]["2"]["interpolated"] is True
  ar_ms, draft_ms = result["programs"]["ar_step"]["roofline_ms"], result["programs"]["draft_step"]["roofline_ms"]
  e4 = (1 - 0.8 ** 5) / 0.2
  assert spec["4"] == pytest.approx((4 * draft_ms + result["verify_by_k"]["4"]["roofline_ms"]) / e4)
  assert result["predicted_ms_per_token_ar"] == pytest.approx(ar_ms)
  for k in range(1, 8):  # interpolated verify costs grow with K
    assert result["verify_by_k"][str(k)]["roofline_ms"] <= result["verify_by_k"][str(k + 1)]["roofline_ms"]
  paper = result["paper_comparison"]
  assert paper["rows"][0]["alpha_implied_paper_costs"] is not None and paper["explanation"]
  assert result["measured_comparison"]["summary"]["n"] == 1
  for heading in ("## Programs (per device)", "## Prediction at acceptance rate 0.8", "## Against the paper",
                  "TFLOP/s", "cloud.google.com/tpu/docs/v4"):
    assert heading in markdown
