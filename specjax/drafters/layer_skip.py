"""LayerSkip self-speculation: the target's own first N layers, final norm and head draft, optionally through a
small trained exit adapter; the layers are the target's arrays (no second model is stored, only the adapter)."""

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.config import ModelConfig
from specjax.drafters.draft_model import DraftModel
from specjax.drafters.truncated import truncated_model
from specjax.model import Model
from specjax.models.llama import Llama, RMSNorm


def default_exit_layers(target_layers: int) -> int:
  """How many of the target's layers draft when no number is given: a quarter of its depth, rounded up (8 of
  SmolLM2-135M's 30); the benchmark, the CLI and training all take it from here."""
  return max(1, -(-target_layers // 4))


class ExitAdapter(nnx.Module):
  """h + up(SiLU(down(norm(h)))) on the final-normed hidden; `up` starts at zero, so an untrained adapter is
  the plain early exit."""

  def __init__(self, d_model: int, rank: int, norm_eps: float, rngs: nnx.Rngs):
    self.norm = RMSNorm(d_model, norm_eps, jnp.float32)
    self.down = nnx.Linear(d_model, rank, use_bias=False, rngs=rngs, kernel_init=nnx.initializers.normal(d_model**-0.5))
    self.up = nnx.Linear(rank, d_model, use_bias=False, rngs=rngs, kernel_init=nnx.initializers.zeros_init())

  def __call__(self, hidden_xD: jax.Array) -> jax.Array:
    h = hidden_xD.astype(jnp.float32)
    return (h + self.up(jax.nn.silu(self.down(self.norm(h))))).astype(hidden_xD.dtype)


class EarlyExitLlama(Llama):
  """The target's first N layers with an exit adapter before the output head."""

  def __init__(self, config: ModelConfig, adapter_rank: int, rngs: nnx.Rngs):
    super().__init__(config, rngs)
    self.exit_adapter = ExitAdapter(config.d_model, adapter_rank, config.norm_eps, rngs)

  def logits(self, hidden_BxTxD):
    return super().logits(self.exit_adapter(hidden_BxTxD))


def early_exit_model(target: Model, n_layers: int, adapter_rank: int, adapter: nnx.State | None = None,
                     seed: int = 0) -> Model:
  """A Model of the target's first n_layers (the same arrays) and an exit adapter (new, or `adapter`)."""
  truncated = truncated_model(target, n_layers)
  abstract = nnx.eval_shape(lambda: EarlyExitLlama(truncated.config, adapter_rank, nnx.Rngs(seed)))
  graphdef, params = nnx.split(abstract)
  if adapter is None:
    _, adapter = nnx.split(ExitAdapter(truncated.config.d_model, adapter_rank, truncated.config.norm_eps,
                                       nnx.Rngs(seed)))
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
