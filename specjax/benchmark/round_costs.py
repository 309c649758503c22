"""A speculative round's cost on this machine, in target steps, from measured parts (Sequoia's hardware-aware tree
choice, `specjax.trees.fastest`): the target's verification of N + 1 positions against its one-position step, a
drafter's call over w rows against that step, and the rest of a round as the residual of a timed round."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.benchmark.verify_cost import paired_seconds, paired_verify_cost, scoring_call
from specjax.cache import init_cache
from specjax.drafters.draft_model import DraftModel
from specjax.drafters.feature_head import FeatureHead
from specjax.drafters.vocab_head import embed_tokens, vocab_logits
from specjax.sampling import SamplingParams, distribution, top_k
from specjax.trees import StaticTree
from specjax.trees.fastest import MeasuredRoundCost

GREEDY = SamplingParams(temperature=0.0)
LEVEL_REPEATS = 20
DRAFT_WIDTHS = (1, 2, 4, 8)


def times_its_level(drafter) -> bool:
  """Whether a drafter's tree costs one call per level at that level's width (a feature head, a draft model); the
  others (Medusa's heads, prompt lookup) draft a whole tree from one call at the root, which the round's residual
  holds."""
  return isinstance(drafter, (FeatureHead, DraftModel))


def draft_level(drafter, rows: int, filled: int, repeats: int = LEVEL_REPEATS):
  """A drafter's work for one tree level of `rows` nodes, `repeats` times in one program (so that host dispatch,
  which the fused decode loop does not pay per call, is amortized), as its `propose_tree` and `grow` run it: the
  feature head's decoder layers and draft-vocabulary head, or the draft model's call; then the distribution and
  the top-4 ranking over the vocabulary. Returns a callable whose time / repeats is one level's."""
  if not times_its_level(drafter):
    raise ValueError(f"{type(drafter).__name__} does not draft a tree level by level; only a feature head's or a "
                     "draft model's level can be timed")
  params = drafter.params()
  is_head = isinstance(drafter, FeatureHead)
  config = drafter.module(params["net"]).layer_config if is_head else drafter.model.config
  cache = init_cache(config, 1, filled + 64, dtype=jnp.float32).with_lengths(jnp.full((1,), filled, jnp.int32))
  tokens = jnp.ones((1, rows), jnp.int32)
  positions = filled + jnp.arange(rows, dtype=jnp.int32)[None, :]
  feature = jnp.ones((1, rows, config.d_model), jnp.float32)

  def logits_of(params, carry):
    if is_head:
      net = drafter.module(params["net"])
      out, _ = net(feature + carry, embed_tokens(params["frozen"], tokens), positions, cache)
      return vocab_logits(params["frozen"], net.out_norm(out))
    moved = tokens + (carry > 1.0).astype(jnp.int32)   # always `tokens`, but XLA cannot hoist the call
    logits, _, _ = drafter.model.with_params(params).module()(moved, positions, cache)
    return logits

  @jax.jit
  def calls(params):
    def level(_, carry):   # each level reads the last one's result, so none is hoisted or dropped
      logits = logits_of(params, carry)
      return carry + 1e-30 * (jnp.max(distribution(logits, GREEDY)) + top_k(logits, 4)[0].sum())
    return jax.lax.fori_loop(0, repeats, level, jnp.zeros((), jnp.float32))

  return lambda: calls(params)


def verify_curve(target, nodes, *, width: int, filled: int, cache_size: int, calls: int,
                 each=lambda positions, measure: measure()) -> dict:
  """{positions: verification / step}: the target's paired call over a balanced tree of each N in `nodes` (at
  most `width` children a node) and its root, against its one-position step (`paired_verify_cost`); `each(positions,
  measure)` runs each point's `measure()` and returns its ratio (a caller's hook around it)."""
  curve = {1: 1.0}
  for n in sorted(set(nodes)):
    tree = StaticTree.balanced(n, width=min(width, n))
    curve[n + 1] = each(n + 1, lambda: paired_verify_cost(target, batch=1, k=n, filled=filled, cache_size=cache_size,
                                                          calls=calls, tree=tree)["ratio"])
  return curve


def never_cheaper(verify_by_positions: dict) -> dict:
  """The verification curve made non-decreasing (each point the most of it and the points below it): scoring more
  positions never costs less, so a dip is a paired median's noise."""
  curve, most = {}, 0.0
  for positions, ratio in sorted(verify_by_positions.items()):
    most = curve[positions] = max(most, ratio)
  return curve


def draft_costs(target, drafter, *, filled: int, calls: int) -> dict:
  """{"draft_step": one level of one row / the target's step, "draft_by_width": {w: w rows / one row},
  "step_ms"}, each a median over `calls` alternated pairs; a drafter that drafts its tree in one call costs 0
  here (its call is in the round's residual)."""
  step = scoring_call(target, batch=1, positions=1, filled=filled, cache_size=filled + 64)
  if not times_its_level(drafter):
    step_s, _ = paired_seconds(step, step, calls)
    return {"draft_step": 0.0, "draft_by_width": None, "step_ms": 1e3 * float(np.median(step_s))}
  one = draft_level(drafter, 1, filled)
  step_s, one_s = paired_seconds(step, one, calls)
  by_width = {1: 1.0}
  for w in DRAFT_WIDTHS[1:]:
    a_s, b_s = paired_seconds(one, draft_level(drafter, w, filled), calls)
    by_width[w] = float(np.median(b_s / a_s))
  return {"draft_step": float(np.median(one_s / step_s)) / LEVEL_REPEATS, "draft_by_width": by_width,
          "step_ms": 1e3 * float(np.median(step_s))}


def decode_ms_per_round(result) -> float:
  """A `generate` call's decode ms per round (its prefill left out)."""
  return 1e3 * (result.stats.wall_time_s - result.stats.first_token_s) / max(result.stats.rounds, 1)


def round_cost(verify_by_positions: dict, draft: dict, timed_tree=None, timed_round_ms: float = 0.0):
  """MeasuredRoundCost from `verify_curve` and `draft_costs`; with a timed round of `timed_tree` (decode ms per
  round, warm), the rest of a round (acceptance walk, commit, the loop, a one-call drafter) is its residual over
  the parts, as a fixed overhead a round."""
  cost = MeasuredRoundCost(verify_by_positions=verify_by_positions, draft_step=draft["draft_step"],
                           draft_by_width=draft["draft_by_width"])
  if timed_tree is None:
    return cost
  return dataclasses.replace(cost, overhead=max(timed_round_ms / draft["step_ms"] - cost(timed_tree), 0.0))
