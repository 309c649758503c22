"""The programs of one speculative round, built over abstract sharded arguments so nothing is allocated.

  draft_step   one draft-model position: forward, q = distribution, sample (K of these per round)
  verify_k{K}  the target over K+1 positions, p = distribution, modified rejection sampling
  ar_step      one target position: forward, distribution, sample (the autoregressive baseline)
The KV cache is donated, as in the generation loop, so its update is in place.
"""

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from specjax.cache import KVCache, cache_size
from specjax.config import ModelConfig
from specjax.kernels import use_kernels
from specjax.rejection import accept
from specjax.sampling import SamplingParams, distribution, sample
from specjax.sharding import abstract_sharded_params, batch_sharding, cache_sharding

CACHE_ARG = 3  # position of the (donated) cache among every program's arguments


@dataclasses.dataclass(frozen=True)
class Program:
  """A function, the abstract arguments it is lowered with, and what it stands for in a round."""

  name: str
  role: str            # "target" or "draft"
  config: ModelConfig
  positions: int       # positions scored per row
  k: int               # drafts verified (0 for single-position steps)
  fn: Callable
  args: tuple

  def lower(self):
    return jax.jit(self.fn, donate_argnums=(CACHE_ARG,)).lower(*self.args)


def _single_position(graphdef, sampling: SamplingParams):
  def step(params, tokens_Bx1, positions_Bx1, cache, key_data_Bx2):
    with use_kernels(False):  # sharded programs keep XLA's dot (a custom call has no partitioning rule)
      logits_Bx1xV, _, cache = nnx.merge(graphdef, params)(tokens_Bx1, positions_Bx1, cache)
    probs_BxV = distribution(logits_Bx1xV[:, -1], sampling)
    next_B = jax.vmap(sample)(jax.random.wrap_key_data(key_data_Bx2), probs_BxV)
    return next_B, probs_BxV, cache
  return step


def _verify(graphdef, sampling: SamplingParams):
  def verify(params, tokens_BxK1, positions_BxK1, cache, key_data_Bx2, q_BxKxV):
    with use_kernels(False):
      logits_BxK1xV, _, cache = nnx.merge(graphdef, params)(tokens_BxK1, positions_BxK1, cache)
    p_BxK1xV = distribution(logits_BxK1xV, sampling)
    n_accepted_B, next_B = accept(p_BxK1xV, q_BxKxV, tokens_BxK1[:, 1:], jax.random.wrap_key_data(key_data_Bx2))
    return n_accepted_B, next_B, cache
  return verify


def abstract_cache(mesh: Mesh, config: ModelConfig, batch: int, cache_len: int) -> KVCache:
  shardings = cache_sharding(mesh, config, batch)
  shape = (config.n_layers, batch, cache_size(cache_len), config.n_kv_heads, config.head_dim_)
  kv = jnp.dtype(config.dtype)
  return KVCache(k=jax.ShapeDtypeStruct(shape, kv, sharding=shardings.k),
                 v=jax.ShapeDtypeStruct(shape, kv, sharding=shardings.v),
                 lengths=jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=shardings.lengths))


def _common_args(mesh, config, batch, positions, cache_len):
  graphdef, params = abstract_sharded_params(mesh, config)
  rows = batch_sharding(mesh, batch, 2)
  tokens = jax.ShapeDtypeStruct((batch, positions), jnp.int32, sharding=rows)
  keys = jax.ShapeDtypeStruct((batch, 2), jnp.uint32, sharding=rows)
  return graphdef, (params, tokens, tokens, abstract_cache(mesh, config, batch, cache_len), keys)


def step_program(name: str, role: str, mesh: Mesh, config: ModelConfig, batch: int, cache_len: int,
                 sampling: SamplingParams) -> Program:
  """One position of `config`'s model (the draft step or the autoregressive step)."""
  graphdef, args = _common_args(mesh, config, batch, 1, cache_len)
  return Program(name, role, config, 1, 0, _single_position(graphdef, sampling), args)


def verify_program(mesh: Mesh, config: ModelConfig, batch: int, cache_len: int, k: int,
                   sampling: SamplingParams) -> Program:
  """The target over K+1 positions with the rejection sampler, as in one verification round."""
  graphdef, args = _common_args(mesh, config, batch, k + 1, cache_len)
  q = jax.ShapeDtypeStruct((batch, k, config.vocab_size), jnp.float32, sharding=batch_sharding(mesh, batch, 3))
  return Program(f"verify_k{k}", "target", config, k + 1, k, _verify(graphdef, sampling), args + (q,))
