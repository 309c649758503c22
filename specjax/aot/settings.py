"""What an AOT run needs, read and checked from an ml_collections config (configs/chinchilla_70b_4b.py etc.)."""

import dataclasses

from specjax.config import ModelConfig
from specjax.quantize import check_weights
from specjax.sampling import SamplingParams
from specjax.sharding import parse_mesh_shape
from specjax.trees.static import StaticTree

# Assumed, bracketing: a rank-r > 0 child is accepted at this rate once every higher-ranked sibling was rejected.
# 1.0 is what SmolLM2's greedy q4 self-draft shows (docs/results.md section 15: a tree of 8 adds what a second
# choice that never misses would add); 0.25 and 0.5 are for drafts whose second choice is a guess.
TREE_SIBLING_RATES = (0.25, 0.5, 1.0)


@dataclasses.dataclass(frozen=True)
class AotSettings:
  target: ModelConfig
  draft: ModelConfig
  topology: str
  mesh: str            # "DATAxMODEL"; "" = all chips on "model"
  batch_size: int
  k: int
  ks: tuple            # K values predicted
  compile_ks: tuple    # K values whose verify is compiled (others are interpolated)
  cache_len: int       # positions the KV caches hold
  context_len: int     # filled positions a step reads
  acceptance_rate: float
  sampling: SamplingParams
  paper: dict | None = None
  draft_weights: str = "float"   # "float" (the draft config's dtype), "int8" or "q4": the draft's stored weights
  tree_nodes: tuple = ()         # node budgets N whose tree verify is compiled (StaticTree.balanced(N)); () = none
  tree_sibling_rates: tuple = TREE_SIBLING_RATES  # acceptance of a lower-ranked child once the higher ones failed

  def mesh_shape(self, n_devices: int) -> tuple[int, int]:
    if not self.mesh:
      return 1, n_devices
    return parse_mesh_shape(self.mesh)


def _model(values, who) -> ModelConfig:
  values = values.to_dict() if hasattr(values, "to_dict") else dict(values)
  try:
    return ModelConfig.from_dict(values)
  except (TypeError, ValueError) as err:
    raise ValueError(f"config.{who}: {err}") from None


def _positive_ints(name, values) -> tuple:
  values = tuple(values)
  if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
    raise ValueError(f"config.{name} must be a non-empty list of ints >= 1, got {list(values)}")
  return values


def _tree_settings(c, tree_nodes) -> dict:
  nodes = tuple(c.get("tree_nodes", ())) if tree_nodes is None else tuple(tree_nodes)
  nodes = _positive_ints("tree_nodes", nodes) if nodes else ()
  for n in nodes:
    try:
      StaticTree.balanced(n)
    except ValueError as err:
      raise ValueError(f"config.tree_nodes: {err}") from None
  rates = tuple(float(r) for r in c.get("tree_sibling_rates", TREE_SIBLING_RATES))
  if not rates or any(not 0.0 <= r <= 1.0 for r in rates):
    raise ValueError(f"config.tree_sibling_rates must be a non-empty list in [0, 1], got {list(rates)}")
  return dict(tree_nodes=tuple(sorted(set(nodes))), tree_sibling_rates=rates)


def settings_from_config(config, topology: str = "", mesh: str | None = None, tree_nodes=None) -> AotSettings:
  """Reads the AOT keys of `config`; `topology` / `mesh` / `tree_nodes` override the config's (mesh "" = 1 x all
  chips)."""
  c = config
  k = _positive_ints("k", [c.k])[0]
  ks = _positive_ints("ks", c.get("ks", (k,)))
  compile_ks = _positive_ints("compile_ks", c.get("compile_ks", (k,)))
  if k not in compile_ks:
    raise ValueError(f"config.compile_ks {list(compile_ks)} must include config.k={k}")
  alpha = float(c.acceptance_rate)
  if not 0.0 <= alpha <= 1.0:
    raise ValueError(f"config.acceptance_rate must be in [0, 1], got {alpha}")
  cache_len, context_len = _positive_ints("cache_len/context_len", [c.cache_len, c.context_len])
  if context_len > cache_len:
    raise ValueError(f"config.context_len {context_len} exceeds config.cache_len {cache_len}")
  target = _model(c.target, "target")
  self_draft = c.get("self_draft", False)
  if not isinstance(self_draft, bool):
    raise ValueError(f"config.self_draft must be True or False, got {self_draft!r}")
  draft = target if self_draft else _model(c.draft, "draft")
  draft_weights = c.get("draft_weights", "float")
  try:
    check_weights(draft_weights)
  except ValueError as err:
    raise ValueError(f"config.draft_weights: {err}") from None
  if draft.vocab_size != target.vocab_size:
    raise ValueError(f"draft vocabulary {draft.vocab_size} differs from the target's {target.vocab_size}")
  for who, model in (("target", target), ("draft", draft)):
    if cache_len > model.max_seq_len:
      raise ValueError(f"config.cache_len {cache_len} exceeds the {who}'s max_seq_len {model.max_seq_len}")
  paper = c.get("paper")
  return AotSettings(
      target=target, draft=draft, topology=topology or c.topology,
      mesh=c.get("mesh", "") if mesh is None else mesh, batch_size=_positive_ints("batch_size", [c.batch_size])[0],
      k=k, ks=tuple(sorted(set(ks) | {k})), compile_ks=tuple(sorted(set(compile_ks))), cache_len=cache_len,
      context_len=context_len, acceptance_rate=alpha,
      sampling=SamplingParams(c.get("temperature", 1.0), c.get("top_k", 0), c.get("top_p", 1.0)),
      paper=paper.to_dict() if hasattr(paper, "to_dict") else paper, draft_weights=draft_weights,
      **_tree_settings(c, tree_nodes))
