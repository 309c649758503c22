"""LayerSkip self-speculation: the target's own first N layers, final norm and head draft, optionally through a
small trained exit adapter; the layers are the target's arrays (no second model is stored, only the adapter)."""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.config import ModelConfig
from specjax.drafters.base import with_pure_dict
from specjax.drafters.draft_model import DraftModel
from specjax.drafters.truncated import truncated_model
from specjax.model import Model
from specjax.models import get_family


def default_exit_layers(target_layers: int) -> int:
  """How many of the target's layers draft when no number is given: a quarter of its depth, rounded up (8 of
  SmolLM2-135M's 30); the benchmark, the CLI and training all take it from here."""
  return max(1, -(-target_layers // 4))


class ExitAdapter(nnx.Module):
  """h + up(SiLU(down(norm(h)))) on the final-normed hidden; `up` starts at zero, so an untrained adapter is
  the plain early exit. The norm is the model family's."""

  def __init__(self, config: ModelConfig, rank: int, rngs: nnx.Rngs):
    d_model = config.d_model
    self.norm = get_family(config.family).norm(d_model, config.norm_eps, jnp.float32)
    self.down = nnx.Linear(d_model, rank, use_bias=False, rngs=rngs, kernel_init=nnx.initializers.normal(d_model**-0.5))
    self.up = nnx.Linear(rank, d_model, use_bias=False, rngs=rngs, kernel_init=nnx.initializers.zeros_init())

  def __call__(self, hidden_xD: jax.Array) -> jax.Array:
    h = hidden_xD.astype(jnp.float32)
    return (h + self.up(jax.nn.silu(self.down(self.norm(h))))).astype(hidden_xD.dtype)


@functools.cache
def early_exit_class(decoder: type) -> type:
  """The family's decoder class with an exit adapter before its output head (parameters: the decoder's and
  `exit_adapter`); one class per decoder, so graphdefs of equal shape compare equal."""

  class EarlyExit(decoder):

    def __init__(self, config: ModelConfig, adapter_rank: int, rngs: nnx.Rngs):
      super().__init__(config, rngs=rngs)
      self.exit_adapter = ExitAdapter(config, adapter_rank, rngs)

    def logits(self, hidden_BxTxD):
      return super().logits(self.exit_adapter(hidden_BxTxD))

  EarlyExit.__name__ = EarlyExit.__qualname__ = f"EarlyExit{decoder.__name__}"
  return EarlyExit


def early_exit_model(target: Model, n_layers: int, adapter_rank: int, adapter: nnx.State | None = None,
                     seed: int = 0) -> Model:
  """A Model of the target's first n_layers (the same arrays) and an exit adapter (new, or `adapter`)."""
  truncated = truncated_model(target, n_layers)
  early_exit = early_exit_class(get_family(truncated.config.family).module)
  graphdef, params = nnx.split(nnx.eval_shape(lambda: early_exit(truncated.config, adapter_rank, nnx.Rngs(seed))))
  if adapter is None:
    _, adapter = nnx.split(ExitAdapter(truncated.config, adapter_rank, nnx.Rngs(seed)))
  params = nnx.merge_state(params, truncated.params)
  params["exit_adapter"] = adapter
  return Model(config=truncated.config, graphdef=graphdef, params=params, tokenizer=target.tokenizer)


class LayerSkip(DraftModel):
  """DraftModel over the target's first N layers; with adapter_rank > 0, through an `early_exit_model`."""

  def __init__(self, model: Model, n_layers: int, adapter_rank: int = 0):
    super().__init__(model)
    self.n_layers, self.adapter_rank = n_layers, adapter_rank

  @classmethod
  def create(cls, target: Model, n_layers: int = 0, adapter_rank: int = 0, adapter: nnx.State | None = None,
             seed: int = 0) -> "LayerSkip":
    """The target's first n_layers (0: `default_exit_layers`) and head, with an exit adapter when adapter_rank."""
    n_layers = n_layers or default_exit_layers(target.config.n_layers)
    model = (early_exit_model(target, n_layers, adapter_rank, adapter, seed) if adapter_rank
             else truncated_model(target, n_layers))
    return cls(model, n_layers, adapter_rank)

  @property
  def adapter(self) -> nnx.State | None:
    return self.model.params["exit_adapter"] if self.adapter_rank else None

  def with_adapter(self, adapter: nnx.State) -> "LayerSkip":
    params = nnx.merge_state(self.model.params, nnx.State({"exit_adapter": adapter}))
    return LayerSkip(self.model.with_params(params), self.n_layers, self.adapter_rank)

  def __repr__(self):
    return f"LayerSkip(n_layers={self.n_layers}, adapter_rank={self.adapter_rank})"

  def saved(self):
    """Only the exit adapter: the layers are the target's."""
    if not self.adapter_rank:
      raise TypeError(f"cannot export {self!r}: nothing trained (the source {self.n_layers} rebuilds it)")
    return {"n_layers": self.n_layers, "adapter_rank": self.adapter_rank}, {"adapter": self.adapter.to_pure_dict()}

  @classmethod
  def from_saved(cls, target: Model, description: dict, restore) -> "LayerSkip":
    fresh = cls.create(target, description["n_layers"], description["adapter_rank"])
    saved = restore({"adapter": fresh.adapter.to_pure_dict()})
    return fresh.with_adapter(with_pure_dict(fresh.adapter, saved["adapter"]))
