"""`run_aot(settings)`: compile the round's programs for a TPU topology and predict ms/token from their rooflines."""

import time

import jax

from specjax.aot import analysis, paper, programs, trees
from specjax.aot.analysis import ProgramFigures, shard_bytes
from specjax.aot.predict import spec_ms_per_token, spec_speedup
from specjax.aot.report import format_bytes
from specjax.aot.settings import AotSettings
from specjax.aot.topology import Topology, get_topology, topology_mesh
from specjax.sharding import abstract_sharded_params, check_divides
from specjax.trees.static import StaticTree

GB = 1e9


def weight_bytes_per_device(mesh, config, weights: str = "float") -> int:
  _, params = abstract_sharded_params(mesh, config, weights)
  return sum(shard_bytes(x.shape, x.dtype, x.sharding) for x in jax.tree.leaves(params))


def check_weights_fit(mesh, topology: Topology, settings: AotSettings) -> dict:
  """Per-device weight bytes of target and draft; a clear error, naming the numbers, when they exceed HBM."""
  sizes = {"target": weight_bytes_per_device(mesh, settings.target),
           "draft": weight_bytes_per_device(mesh, settings.draft, settings.draft_weights)}
  total, hbm = sum(sizes.values()), topology.chip.hbm_bytes
  if total > hbm:
    model = mesh.shape["model"]
    raise ValueError(
        f"weights do not fit: target {sizes['target'] / GB:.2f} GB + draft {sizes['draft'] / GB:.2f} GB = "
        f"{total / GB:.2f} GB per device ({settings.target.param_count() / 1e9:.1f}B + "
        f"{settings.draft.param_count() / 1e9:.2f}B parameters in {settings.target.dtype} over a model axis of "
        f"{model}) exceed the {hbm / GB:.2f} GB of HBM of one {topology.chip.name} chip; use more chips "
        f"(e.g. a larger topology than {topology.name})")
  return sizes


def _compile(program: programs.Program, topology: Topology, settings: AotSettings, log) -> ProgramFigures:
  start = time.perf_counter()
  compiled = program.lower().compile()
  seconds = time.perf_counter() - start
  figures = analysis.analyse(program, compiled, topology.chip, settings.context_len, compile_s=seconds)
  log(f"compiled {program.name} ({program.role}, {program.positions} positions) in {seconds:.1f} s: "
      f"{format_bytes(figures.peak_bytes)} per device, roofline {figures.roofline_ms:.3g} ms")
  return figures


def _verify_figures(ar: ProgramFigures, compiled: dict, k: int) -> ProgramFigures:
  if k in compiled:
    return compiled[k]
  nearest = min(compiled, key=lambda c: (abs(c - k), -c))
  return analysis.interpolate(ar, compiled[nearest], k)


def run_aot(settings: AotSettings, log=print) -> dict:
  topology = get_topology(settings.topology)
  data, model = settings.mesh_shape(topology.n_devices)
  mesh = topology_mesh(topology, data, model)
  check_divides(settings.target, model, "target")
  check_divides(settings.draft, model, "draft")
  weights = check_weights_fit(mesh, topology, settings)
  log(f"{topology.name}: {topology.n_devices} x {topology.chip.name} on {topology.n_hosts} host(s), "
      f"mesh {data}x{model}")

  args = dict(mesh=mesh, batch=settings.batch_size, cache_len=settings.cache_len, sampling=settings.sampling)
  draft = _compile(programs.step_program("draft_step", "draft", config=settings.draft, weights=settings.draft_weights,
                                         **args), topology, settings, log)
  ar = _compile(programs.step_program("ar_step", "target", config=settings.target, **args), topology, settings, log)
  compiled = {k: _compile(programs.verify_program(config=settings.target, k=k, **args), topology, settings, log)
              for k in settings.compile_ks}
  verify = {k: _verify_figures(ar, compiled, k) for k in settings.ks}
  branching = "top_k" if settings.sampling.greedy else "sample"
  tree_shapes = {n: StaticTree.balanced(n, branching=branching) for n in settings.tree_nodes}
  tree_verify = {n: (tree, _compile(programs.tree_verify_program(config=settings.target, tree=tree, **args), topology,
                                    settings, log))
                 for n, tree in tree_shapes.items()}

  alpha, ar_ms, draft_ms = settings.acceptance_rate, ar.roofline_ms, draft.roofline_ms
  everything = [draft, ar, *compiled.values(), *(figures for _, figures in tree_verify.values())]
  resident = (ar.argument_bytes + draft.argument_bytes + max(f.temp_bytes for f in everything)
              + max(f.output_bytes - f.alias_bytes for f in everything))
  result = {
      "topology": topology.name, "chip": topology.chip.to_dict(), "n_devices": topology.n_devices,
      "n_hosts": topology.n_hosts, "mesh": {"data": data, "model": model},
      "target": settings.target.to_dict(), "draft": settings.draft.to_dict(), "draft_weights": settings.draft_weights,
      "target_params": settings.target.param_count(), "draft_params": settings.draft.param_count(),
      "weight_bytes_per_device": weights, "batch_size": settings.batch_size, "k": settings.k,
      "cache_len": settings.cache_len, "context_len": settings.context_len,
      "sampling": {"temperature": settings.sampling.temperature, "top_k": settings.sampling.top_k,
                   "top_p": settings.sampling.top_p},
      "programs": {f.name: f.to_dict() for f in everything},
      "verify_by_k": {str(k): f.to_dict() for k, f in verify.items()},
      "resident_bytes_per_device": resident, "hbm_bytes_per_device": topology.chip.hbm_bytes,
      "fits_hbm": resident <= topology.chip.hbm_bytes and all(f.fits_hbm for f in everything),
      "acceptance_rate": alpha,
      "predicted_ms_per_token_ar": ar_ms,
      "predicted_ms_per_token_spec": {str(k): spec_ms_per_token(alpha, k, ar_ms, draft_ms, verify[k].roofline_ms)
                                      for k in settings.ks},
      "predicted_speedup": {str(k): spec_speedup(alpha, k, ar_ms, draft_ms, verify[k].roofline_ms)
                            for k in settings.ks},
  }
  if tree_verify:
    result["trees"] = trees.tree_predictions(ar, draft, tree_verify, lambda k: _verify_figures(ar, compiled, k), alpha,
                                             settings.tree_sibling_rates, branching)
  if settings.paper:
    comparison = paper.compare_with_paper(settings.paper, settings.k, ar_ms, draft_ms,
                                          verify[settings.k].roofline_ms, ar.n_collectives)
    comparison["explanation"] = paper.explain(comparison)
    comparison["source"] = settings.paper.get("source", "")
    result["paper_comparison"] = comparison
  return result
