"""Medusa heads: K small residual heads on the target's last hidden state, head i guessing the token i + 1
positions past the one that hidden state predicts; drafts form a chain, each drawn from its own head's q, or a
tree whose depth-d nodes all take head d's choices."""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.drafters.trained_head import TrainedHead
from specjax.drafters.vocab_head import draw, vocab_logits
from specjax.trees.grow import grow


@dataclasses.dataclass(frozen=True)
class MedusaConfig:
  d_model: int
  vocab_size: int
  draft_vocab_size: int
  n_heads: int = 4

  @classmethod
  def for_target(cls, target, n_heads: int = 4, draft_vocab_size: int = 0):
    return cls(d_model=target.d_model, vocab_size=target.vocab_size, n_heads=n_heads,
               draft_vocab_size=draft_vocab_size or target.vocab_size)


class MedusaNet(nnx.Module):
  """Head i maps the target's final hidden h to h + SiLU(W_i h + b_i); W_i starts at zero (the target's head)."""

  def __init__(self, config: MedusaConfig, rngs: nnx.Rngs):
    del rngs  # zero initialisation: every head starts as the target's own head
    self.kernel_HxDxD = nnx.Param(jnp.zeros((config.n_heads, config.d_model, config.d_model), jnp.float32))
    self.bias_HxD = nnx.Param(jnp.zeros((config.n_heads, config.d_model), jnp.float32))

  def __call__(self, hidden_xD: jax.Array) -> jax.Array:
    """[..., D] -> [..., n_heads, D], the inputs of the frozen output head."""
    h = hidden_xD.astype(jnp.float32)
    bias = self.bias_HxD[...].reshape((1,) * (h.ndim - 1) + self.bias_HxD.shape)
    return h[..., None, :] + jax.nn.silu(jnp.einsum("...d,hde->...he", h, self.kernel_HxDxD[...]) + bias)


class MedusaHeads(TrainedHead):
  """State: the target's final hidden at position seq_len - 2 (the last verified token), read from the verify
  call's features; K is at most the number of heads."""

  net_class, config_class = MedusaNet, MedusaConfig
  feature_layers = ()
  branches = True

  @property
  def max_k(self) -> int:
    return self.config.n_heads

  @property
  def max_tree_depth(self) -> int:
    return self.config.n_heads

  def init(self, params, tokens_BxS, prompt_len_B, prompt_bucket, features=None):
    return features.hidden_BxTxD[jnp.arange(tokens_BxS.shape[0]), prompt_len_B - 1]

  def propose(self, params, state, tokens_BxS, seq_len_B, k, sampling, keys_B):
    inputs_BxHxD = self.module(params["net"])(state)
    keys_KxB = jnp.moveaxis(jax.vmap(lambda key: jax.random.split(key, k))(keys_B), 1, 0)
    drafts, qs = zip(*(draw(params["frozen"], inputs_BxHxD[:, i], sampling, keys_KxB[i]) for i in range(k)))
    return jnp.stack(drafts, axis=1), jnp.stack(qs, axis=1), state

  def propose_tree(self, params, state, tokens_BxS, seq_len_B, tree, sampling, keys_B, vocab_size):
    """Every node at depth d has head d's choices as children (Medusa's tree: the heads do not see the path)."""
    logits_BxHxV = vocab_logits(params["frozen"], self.module(params["net"])(state))

    def expand(state, tokens_BxL, payload, slots_BxL, layout, depth):
      return jnp.broadcast_to(logits_BxHxV[:, depth, None], tokens_BxL.shape + logits_BxHxV.shape[-1:]), (), state

    draft, state = grow(tree, expand, state, logits_BxHxV[:, 0], (), seq_len_B - 1, sampling, keys_B)
    return draft.tokens_BxN, draft.parent_BxN, draft.q_BxN1xV, state

  def commit(self, params, state, n_accepted_B, seq_len_B, features=None):
    return features.hidden_BxTxD[jnp.arange(state.shape[0]), n_accepted_B]
