"""The layering rules of issue 17, checked on the sources: one place runs the target and owns the round's rules."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "specjax"
ENGINE = PACKAGE / "engine"
MAX_LINES = 350


def _modules():
  return sorted(p for p in PACKAGE.rglob("*.py"))


def _imports(tree):
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module:
      yield node.module, [a.name for a in node.names]
    elif isinstance(node, ast.Import):
      for alias in node.names:
        yield alias.name, []


def _inside(path, *folders):
  return any(folder == path or folder in path.parents for folder in folders)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_engine_imports_the_rejection_sampler_and_routes_kernels(path):
  tree = ast.parse(path.read_text())
  for module, names in _imports(tree):
    if module == "specjax.rejection" or (module == "specjax" and "rejection" in names):
      assert _inside(path, ENGINE), f"{path.name} imports the rejection sampler; go through specjax.engine"
    if "use_kernels" in names:
      assert _inside(path, ENGINE, PACKAGE / "kernels"), f"{path.name} routes kernels; the spec says kernels"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_engine_and_the_model_merge_a_graph_to_run_it(path):
  """`nnx.merge(graphdef, params)` builds a module to run: only the engine (the target) and `model.py` (a Model's
  own `module()`) may; drafters and training run modules through `Model.module()`."""
  tree = ast.parse(path.read_text())
  merges = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "merge" and isinstance(n.func.value, ast.Name) and n.func.value.id == "nnx"]
  if merges:
    assert _inside(path, ENGINE, PACKAGE / "model.py", PACKAGE / "drafters" / "trained_head.py"), (
        f"{path.name} merges a graph into a module at line {merges[0].lineno}")


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_files_stay_small(path):
  assert len(path.read_text().splitlines()) <= MAX_LINES, f"{path} is over {MAX_LINES} lines"


def test_nothing_below_the_engine_imports_benchmark_or_scripts():
  for path in _modules():
    if _inside(path, PACKAGE / "benchmark", PACKAGE / "aot", PACKAGE / "training"):
      continue
    for module, _ in _imports(ast.parse(path.read_text())):
      assert not module.startswith(("specjax.benchmark", "scripts")), f"{path.name} imports {module}"
