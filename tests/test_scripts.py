"""The absl mains run end to end on a tiny random model."""

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


def test_generate_script_names_an_unknown_drafter():
  out = subprocess.run([sys.executable, "scripts/generate.py", "--config=configs/tiny.py", "--config.drafter=magic"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert out.returncode != 0 and "unknown drafter 'magic'" in out.stderr
