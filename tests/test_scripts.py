"""The absl mains run end to end on a tiny random model."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_generate_script_runs_autoregressive_and_speculative():
  out = subprocess.run([sys.executable, "scripts/generate.py", "--config=configs/tiny.py"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-2000:]
  assert "== autoregressive:" in out.stdout and "== speculative (draft_model, k=4)" in out.stdout
  assert "speculative / autoregressive:" in out.stdout
  assert "time to first token" in out.stdout and "(within budget)" in out.stdout   # peak RSS vs params + cache + 1 GiB


def test_generate_script_names_an_unknown_drafter():
  out = subprocess.run([sys.executable, "scripts/generate.py", "--config=configs/tiny.py", "--config.drafter=magic"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert out.returncode != 0 and "unknown drafter 'magic'" in out.stderr


def test_generate_script_runs_the_adaptive_policy():
  out = subprocess.run([sys.executable, "scripts/generate.py", "--config=configs/tiny.py", "--config.adaptive=True",
                        "--config.drafter=prompt_lookup"], cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-2000:]
  assert "== speculative (prompt_lookup, k=auto)" in out.stdout


def test_generate_script_drafts_a_token_tree():
  out = subprocess.run([sys.executable, "scripts/generate.py", "--config=configs/tiny.py",
                        "--config.tree=dynamic:6,3,2", "--config.repeats=1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-2000:]
  assert "== speculative (draft_model, tree=dynamic:6,3,2)" in out.stdout and "tokens per round" in out.stdout
  bad = subprocess.run([sys.executable, "scripts/generate.py", "--config=configs/tiny.py", "--config.tree=dynamic:6",
                        "--config.repeats=1"], cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert bad.returncode != 0 and "dynamic:N,DEPTH,TOP_K" in bad.stderr


def test_host_placement_script_samples_the_step_beside_the_placement(tmp_path):
  out = subprocess.run([sys.executable, "scripts/host_placement.py", "--model=random:tiny", "--seconds=2",
                        "--max_new_tokens=8", f"--output={tmp_path}/placement.json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-2000:]
  report = json.load(open(tmp_path / "placement.json"))
  assert report["samples"] and all(s["ar_ms_per_token"] > 0 for s in report["samples"])
  assert sum(row["samples"] for row in report["summary"].values()) == len(report["samples"])
  assert "autoregressive step median" in out.stdout
