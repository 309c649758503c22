"""What the scripts share: turning config strings into models, drafters and meshes."""

from specjax import drafters
from specjax.checkpoints import load_model
from specjax.config import ModelConfig
from specjax.drafters import truncated_model
from specjax.model import Model, init_model

RANDOM_MODELS = {
    "tiny": ModelConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128,
                        max_seq_len=512),
    "smollm2-135m-shape": ModelConfig(vocab_size=49152, d_model=576, n_layers=30, n_heads=9, n_kv_heads=3,
                                      ffn_dim=1536, max_seq_len=8192, rope_theta=100000.0),
}


TRAINED_KINDS = {"feature_head": "FeatureHead", "medusa": "MedusaHeads", "layer_skip": "LayerSkip"}


def model_from_source(source: str, dtype: str = "") -> Model:
  """A checkpoint path or name, or `random:NAME` for a random model of a known shape."""
  if source.startswith("random:"):
    name = source.split(":", 1)[1]
    if name not in RANDOM_MODELS:
      raise ValueError(f"unknown random model {name!r}; known: {sorted(RANDOM_MODELS)}")
    config = RANDOM_MODELS[name]
    return init_model(config.replace(dtype=dtype) if dtype else config)
  return load_model(source, dtype=dtype or None)


def drafter_from_config(kind: str, target: Model, draft_source: str = "", max_ngram: int = 3):
  """"none", "prompt_lookup", "draft_model" (draft_source: a model source or truncate:N), "layer_skip"
  (draft_source: N, the target's first N layers, or a trained LayerSkip directory), "feature_head" or "medusa"
  (draft_source: a directory written by scripts/train_draft.py, e.g. results/train/feature_head/feature_head/drafter,
  or "untrained" for a freshly initialised head)."""
  if kind == "none":
    return None
  if kind == "prompt_lookup":
    return drafters.PromptLookup(max_ngram=max_ngram)
  if kind == "draft_model":
    if draft_source.startswith("truncate:"):
      return drafters.DraftModel(truncated_model(target, int(draft_source.split(":", 1)[1])))
    return drafters.DraftModel(model_from_source(draft_source, target.config.dtype))
  if kind in TRAINED_KINDS:
    if kind == "layer_skip" and draft_source.isdigit():
      return drafters.LayerSkip.create(target, int(draft_source))
    if draft_source == "untrained":  # freshly initialised: exercises the code path, drafts near chance
      return getattr(drafters, TRAINED_KINDS[kind]).create(target)
    if not draft_source:
      raise ValueError(f"drafter {kind!r} needs draft_source: the directory of a trained {kind} "
                       f"(scripts/train_draft.py writes one), or 'untrained'")
    from specjax.training.export import load_drafter
    drafter = load_drafter(draft_source, target)
    if type(drafter).__name__ != TRAINED_KINDS[kind]:
      raise ValueError(f"{draft_source} holds a {type(drafter).__name__}, not a {TRAINED_KINDS[kind]}")
    return drafter
  raise ValueError(f"unknown drafter {kind!r}; use none, prompt_lookup, draft_model, {', '.join(TRAINED_KINDS)}")


def mesh_from_string(shape: str):
  """"" for none, or "DATAxMODEL"."""
  if not shape:
    return None
  from specjax.sharding import make_mesh
  try:
    data, model = (int(x) for x in shape.lower().split("x"))
  except ValueError:
    raise ValueError(f"mesh must look like DATAxMODEL (e.g. 2x4), got {shape!r}") from None
  return make_mesh(data, model)
