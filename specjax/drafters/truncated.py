"""`truncated_model(model, n_layers)`: a draft model made of the target's first n layers (shared embedding,
final norm and head), for a DraftModel on a checkpoint that has no separate small model."""

from specjax.model import Model, model_from_flat_params
from specjax.models import get_family


def truncated_model(model: Model, n_layers: int) -> Model:
  if isinstance(n_layers, bool) or not isinstance(n_layers, int) or not 1 <= n_layers <= model.config.n_layers:
    raise ValueError(f"n_layers must be an int in [1, {model.config.n_layers}], got {n_layers!r}")
  layer_of = get_family(model.config.family).layer_of
  flat = {name: value for name, value in model.flat_params().items()
          if (layer := layer_of(name)) is None or layer < n_layers}
  return model_from_flat_params(model.config.replace(n_layers=n_layers), flat, tokenizer=model.tokenizer,
                                source=f"first {n_layers} layers")
