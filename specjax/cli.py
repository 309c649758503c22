"""What the scripts share: turning config strings into models, drafters, token trees and meshes."""

from specjax.checkpoints import load_model
from specjax.config import ModelConfig
from specjax.drafters import registry
from specjax.model import Model, init_model

RANDOM_MODELS = {
    "tiny": ModelConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128,
                        max_seq_len=512),
    "smollm2-135m-shape": ModelConfig(vocab_size=49152, d_model=576, n_layers=30, n_heads=9, n_kv_heads=3,
                                      ffn_dim=1536, max_seq_len=8192, rope_theta=100000.0),
}


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
  """The drafter `kind` names in `specjax.drafters.registry` ("none": None) for `target`, built from draft_source
(the registry says what each method takes: truncate:N or a model source for draft_model, N or a trained directory
for layer_skip, a directory that scripts/train_draft.py wrote, "shipped" or "untrained" for medusa and feature_head)."""
  return registry.build(kind, target, draft_source, {"prompt_lookup_max_ngram": max_ngram})


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


def tree_from_string(spec: str):
  """"" for none (a chain of K), "dynamic:N,DEPTH,TOP_K" for a `DynamicTree` (EAGLE-2) or "static:N,WIDTH" for the
  balanced `StaticTree` of N nodes; children are the draft's ranked choices (branching "top_k")."""
  if not spec:
    return None
  from specjax.trees import DynamicTree, StaticTree
  kind, _, numbers = spec.partition(":")
  shapes = {"dynamic": (3, "dynamic:N,DEPTH,TOP_K (e.g. dynamic:16,8,4)", DynamicTree),
            "static": (2, "static:N,WIDTH (e.g. static:16,4)", StaticTree.balanced)}
  if kind not in shapes:
    raise ValueError(f"tree must be '', {' or '.join(form for _, form, _ in shapes.values())}; got {spec!r}")
  count, form, build = shapes[kind]
  try:
    values = [int(x) for x in numbers.split(",")]
  except ValueError:
    values = []
  if len(values) != count:
    raise ValueError(f"a {kind} tree is written {form}; got {spec!r}")
  return build(*values)
