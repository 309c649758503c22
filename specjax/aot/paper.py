"""The roofline prediction set beside a paper's reported ms/token and speedups (Chen et al. 2023, Table 1).

For each reported speedup: the acceptance rate it implies (i) under the paper's own cost ratio (draft ms/token
over target ms/token, Section 3) and (ii) under the roofline's; then what the roofline predicts at (i).
"""

from specjax.aot.predict import implied_alpha, spec_ms_per_token, spec_speedup


def compare_with_paper(paper: dict, k: int, ar_ms: float, draft_step_ms: float, verify_ms: float,
                       n_collectives_ar: int) -> dict:
  """`paper`: {"ar_ms_per_token", "draft_ms_per_token", "rows": [{"task", "ms_per_token", "speedup"}]}."""
  paper_ar, paper_draft = float(paper["ar_ms_per_token"]), float(paper.get("draft_ms_per_token") or 0.0)
  verify_ratio = verify_ms / ar_ms  # the paper gives no verify time: take the compiled programs' ratio
  rows = []
  for row in paper["rows"]:
    speedup = float(row["speedup"])
    alpha_paper = (implied_alpha(speedup, k, paper_ar, paper_draft, verify_ratio * paper_ar)
                   if paper_draft else None)
    alpha_roofline = implied_alpha(speedup, k, ar_ms, draft_step_ms, verify_ms)
    at = alpha_paper if alpha_paper is not None else alpha_roofline
    rows.append({
        "task": row["task"], "paper_ms_per_token": float(row["ms_per_token"]), "paper_speedup": speedup,
        "alpha_implied_paper_costs": alpha_paper, "alpha_implied_roofline_costs": alpha_roofline,
        "roofline_ms_per_token": spec_ms_per_token(at, k, ar_ms, draft_step_ms, verify_ms) if at is not None else None,
        "roofline_speedup": spec_speedup(at, k, ar_ms, draft_step_ms, verify_ms) if at is not None else None,
    })
  gap_ms = paper_ar - ar_ms
  return {
      "k": k, "rows": rows,
      "paper_ar_ms_per_token": paper_ar, "roofline_ar_ms_per_token": ar_ms,
      "paper_fraction_of_roofline": ar_ms / paper_ar,
      "paper_draft_cost_ratio": paper_draft / paper_ar if paper_draft else None,
      "roofline_draft_cost_ratio": draft_step_ms / ar_ms,
      "verify_cost_ratio": verify_ratio,
      "us_per_collective_to_close_ar_gap": 1e3 * gap_ms / n_collectives_ar if n_collectives_ar and gap_ms > 0 else None,
  }


def explain(comparison: dict) -> list[str]:
  """The gap between the roofline and the paper, in sentences built from the numbers."""
  c = comparison
  lines = [f"Autoregressive: the roofline gives {c['roofline_ar_ms_per_token']:.2f} ms/token against the paper's "
           f"{c['paper_ar_ms_per_token']:.2f} ms: the paper's decode step ran at {c['paper_fraction_of_roofline']:.0%} "
           "of the HBM roofline, as batch-1 decoding does when per-layer latencies (kernel launches, the two "
           "all-reduces of every layer, small-matrix inefficiency) are not hidden behind weight reads."]
  if c["us_per_collective_to_close_ar_gap"]:
    lines.append(f"If the whole gap were collective latency, each all-reduce of the AR step would cost "
                 f"{c['us_per_collective_to_close_ar_gap']:.0f} us.")
  if c["paper_draft_cost_ratio"] is not None:
    measured, roofline = c["paper_draft_cost_ratio"], c["roofline_draft_cost_ratio"]
    direction = "over" if roofline < measured else "under"
    lines.append(f"Draft cost: the paper's draft step takes {measured:.3f} of a target step; the roofline says "
                 f"{roofline:.3f}. So at the same acceptance rate the roofline {direction}-predicts the speedup "
                 "(compare the paper's speedup with the roofline's); a shallow, narrow draft is usually further from "
                 "its roofline than the target, because fixed per-layer costs weigh more when a layer reads little.")
  lines.append("The acceptance rates are those of Leviathan et al.'s i.i.d. model; Chen et al. report speedups, "
               "not acceptance rates, so these are inferred, not measured.")
  return lines
