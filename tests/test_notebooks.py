"""Every notebook in colab/ runs top to bottom on CPU (nbclient, a fresh kernel each) and fails on any error."""

import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

COLAB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "colab")
NOTEBOOKS = sorted(n for n in os.listdir(COLAB) if n.endswith(".ipynb"))


def test_every_notebook_is_listed():
  assert NOTEBOOKS == ["01_quickstart.ipynb", "02_benchmark.ipynb", "03_tpu_mesh.ipynb"]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_on_cpu(name, monkeypatch):
  for variable in ("XLA_FLAGS", "JAX_PLATFORMS"):  # the kernel starts its own jax; the notebook sets what it needs
    monkeypatch.delenv(variable, raising=False)
  book = nbformat.read(os.path.join(COLAB, name), as_version=4)
  client = nbclient.NotebookClient(book, timeout=900, kernel_name="python3", resources={"metadata": {"path": COLAB}})
  client.execute()  # raises CellExecutionError, naming the cell, on any error
