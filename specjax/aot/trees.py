"""Tree drafts at a topology's scale: the compiled tree verify beside the chain's, and the predicted speedup of the
best static tree of N nodes under a per-rank acceptance (Sequoia's positional model, `specjax.benchmark.theory`).

  tree ms/token = (sum over the round's draft calls of t_draft(call) + t_tree_verify(N)) / E_tree
  E_tree        = 1 + sum over nodes of the product of accept_by_rank over the node's ranks
The draft makes one call per level above the leaves (`DraftModel.propose_tree`: the root's context, then the nodes
with children of each level); a call over w positions is the compiled 1-position draft step widened
(`analysis.widen`). Rank 0 is accepted at the chain's alpha, a lower rank at `sibling_rate` once every higher-ranked
sibling was rejected (`theory.rank_acceptance`).
"""

from specjax.aot.analysis import ProgramFigures, widen
from specjax.aot.predict import spec_speedup
from specjax.benchmark import theory
from specjax.trees.fastest import draft_calls, ranked_choices
from specjax.trees.static import StaticTree


def tree_round_ms(tree: StaticTree, draft_step: ProgramFigures, verify_ms: float) -> float:
  """Roofline ms of one tree round: its draft calls, then the verification of its N nodes."""
  return sum(widen(draft_step, width).roofline_ms for width in draft_calls(tree)) + verify_ms


def tree_speedup(tree: StaticTree, accept_by_rank, ar_ms: float, draft_step: ProgramFigures,
                 verify_ms: float) -> float:
  """t_ar / tree ms per token."""
  return ar_ms * theory.tree_expected_tokens(tree, accept_by_rank) / tree_round_ms(tree, draft_step, verify_ms)


def best_static_tree(n_nodes: int, accept_by_rank, ar_ms: float, draft_step: ProgramFigures, verify_ms: float,
                     branching: str) -> tuple[StaticTree, float]:
  """(tree, speedup): over depths 1..N, the likeliest tree of N nodes with the best speedup (deeper trees accept
  more but make more draft calls)."""
  best = ranked_choices(accept_by_rank, lambda t: tree_round_ms(t, draft_step, verify_ms) / ar_ms, (n_nodes,),
                        n_nodes, branching, chains=False)[0]
  return best.tree, best.speedup


def _tree_entry(tree: StaticTree, accept_by_rank, ar_ms, draft_step, verify_ms) -> dict:
  speedup = tree_speedup(tree, accept_by_rank, ar_ms, draft_step, verify_ms)
  return {"paths": [list(p) for p in tree.paths], "depth": tree.max_depth, "draft_calls": list(draft_calls(tree)),
          "expected_tokens": theory.tree_expected_tokens(tree, accept_by_rank),
          "draft_ms": tree_round_ms(tree, draft_step, 0.0), "ms_per_token": ar_ms / speedup, "speedup": speedup}


def tree_predictions(ar: ProgramFigures, draft_step: ProgramFigures, trees: dict, chain_verify, alpha: float,
                     sibling_rates: tuple, branching: str) -> dict:
  """trees: {N: (the compiled StaticTree, its ProgramFigures)}; chain_verify(k): the chain verify's figures at K.
  Per N: both verify costs against the step, the best chain of K <= N drafts, and per sibling rate the best tree
  of N nodes and the compiled (balanced) tree, each with its expected tokens and speedup."""
  ar_ms, rows = ar.roofline_ms, []
  for n, (compiled_tree, figures) in sorted(trees.items()):
    chain_ms = {k: chain_verify(k).roofline_ms for k in range(1, n + 1)}
    chain = {k: spec_speedup(alpha, k, ar_ms, draft_step.roofline_ms, chain_ms[k]) for k in chain_ms}
    best_k = max(chain, key=lambda k: (chain[k], -k))
    by_rate = {}
    for rate in sibling_rates:
      accept = theory.rank_acceptance(alpha, rate, n)
      best, _ = best_static_tree(n, accept, ar_ms, draft_step, figures.roofline_ms, branching)
      entry = _tree_entry(best, accept, ar_ms, draft_step, figures.roofline_ms)
      by_rate[str(rate)] = {"accept_by_rank": list(accept[:3]), "best": entry,
                            "balanced": _tree_entry(compiled_tree, accept, ar_ms, draft_step, figures.roofline_ms),
                            "vs_best_chain": entry["speedup"] / chain[best_k]}
    rows.append({"n": n, "program": figures.name, "compiled_paths": [list(p) for p in compiled_tree.paths],
                 "verify_ms": figures.roofline_ms, "chain_verify_ms": chain_ms[n], "ar_ms": ar_ms,
                 "verify_ratio": figures.roofline_ms / ar_ms, "chain_verify_ratio": chain_ms[n] / ar_ms,
                 "chain_interpolated": chain_verify(n).interpolated, "best_chain_k": best_k,
                 "best_chain_speedup": chain[best_k], "by_sibling_rate": by_rate})
  return {"alpha": alpha, "sibling_rates": list(sibling_rates), "branching": branching, "rows": rows}
