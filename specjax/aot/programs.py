"""The programs of one speculative round, composed of the engine's own round functions (`engine.score_call`,
`sample_tokens`, `accept_drafts`) and built over abstract sharded arguments so nothing is allocated.

  draft_step   one draft-model position: the scoring call, then a sampled token (K of these per round)
  verify_k{K}  the target over K+1 positions and the engine's acceptance (modified rejection sampling)
  ar_step      one target position: the scoring call, then a sampled token (the autoregressive baseline)
  tree_verify_n{N}  the target over the root + N nodes of a StaticTree (its attention and depth positions), exact
               tree acceptance and the accepted path compacted in the cache, as `engine.tree_round` verifies
The KV cache is donated, as in the generation loop, so its update is in place.
"""

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from specjax.cache import KVCache, cache_size
from specjax.config import ModelConfig
from specjax import engine
from specjax.engine.round import verify_tree
from specjax.sampling import SamplingParams
from specjax.spec import TargetSpec
from specjax.sharding import abstract_sharded_params, batch_sharding, cache_sharding
from specjax.trees.static import StaticTree

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


def _single_position(spec: TargetSpec, sampling: SamplingParams):
  """The engine's one-position step: the scoring call, then a token from the sampling distribution."""
  def step(params, tokens_Bx1, positions_Bx1, cache, key_data_Bx2):
    logits_Bx1xV, cache = engine.score_call(params, tokens_Bx1, positions_Bx1, cache, spec=spec)
    next_B, probs_BxV = engine.sample_tokens(jax.random.wrap_key_data(key_data_Bx2), logits_Bx1xV[:, -1], sampling)
    return next_B, probs_BxV, cache
  return step


def _verify(spec: TargetSpec, sampling: SamplingParams):
  """The engine's verification: the scoring call over [last, d_1..d_K], then its acceptance rule."""
  def verify(params, tokens_BxK1, positions_BxK1, cache, key_data_Bx2, q_BxKxV):
    logits_BxK1xV, cache = engine.score_call(params, tokens_BxK1, positions_BxK1, cache, spec=spec)
    n_accepted_B, next_B = engine.accept_drafts(logits_BxK1xV, q_BxKxV, tokens_BxK1[:, 1:],
                                                jax.random.wrap_key_data(key_data_Bx2), sampling)
    return n_accepted_B, next_B, cache
  return verify


def _tree_verify(spec: TargetSpec, sampling: SamplingParams, tree: StaticTree, vocab_size: int):
  """`engine.tree_round`'s verification: one call over [root] + nodes in consecutive slots from the root's, exact
  acceptance down the tree, the accepted path compacted (q is read only by branching="sample")."""
  def verify(params, tokens_BxN1, slots_BxN1, cache, key_data_Bx2, q_BxN1xV=None):
    batch, n1 = tokens_BxN1.shape
    if q_BxN1xV is None:
      q_BxN1xV = jnp.zeros((batch, n1, vocab_size), jnp.float32)
    parent_BxN = jnp.broadcast_to(jnp.asarray(tree.parents, jnp.int32), (batch, n1 - 1))
    with engine.traced(spec, params) as target:
      path_BxN, n_accepted_B, next_B, cache, _ = verify_tree(
          target, tokens_BxN1, slots_BxN1, cache, parent_BxN, q_BxN1xV, jax.random.wrap_key_data(key_data_Bx2),
          branching=tree.branching, sampling=sampling)
    return path_BxN, n_accepted_B, next_B, cache
  return verify


def abstract_cache(mesh: Mesh, config: ModelConfig, batch: int, cache_len: int) -> KVCache:
  shardings = cache_sharding(mesh, config, batch)
  shape = (config.n_layers, batch, cache_size(cache_len), config.n_kv_heads, config.head_dim_)
  kv = jnp.dtype(config.dtype)
  return KVCache(k=jax.ShapeDtypeStruct(shape, kv, sharding=shardings.k),
                 v=jax.ShapeDtypeStruct(shape, kv, sharding=shardings.v),
                 lengths=jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=shardings.lengths))


def _common_args(mesh, config, batch, positions, cache_len, weights="float"):
  graphdef, params = abstract_sharded_params(mesh, config, weights)
  rows = batch_sharding(mesh, batch, 2)
  tokens = jax.ShapeDtypeStruct((batch, positions), jnp.int32, sharding=rows)
  keys = jax.ShapeDtypeStruct((batch, 2), jnp.uint32, sharding=rows)
  return graphdef, (params, tokens, tokens, abstract_cache(mesh, config, batch, cache_len), keys)


def step_program(name: str, role: str, mesh: Mesh, config: ModelConfig, batch: int, cache_len: int,
                 sampling: SamplingParams, weights: str = "float") -> Program:
  """One position of `config`'s model (the draft step or the autoregressive step), on `weights` as `load_model`
  takes them ("int8" / "q4": the quantized weights' XLA path)."""
  graphdef, args = _common_args(mesh, config, batch, 1, cache_len, weights)
  spec = TargetSpec(graphdef=graphdef, mesh=mesh, kernels=False)  # a custom call has no partitioning rule
  return Program(name, role, config, 1, 0, _single_position(spec, sampling), args)


def verify_program(mesh: Mesh, config: ModelConfig, batch: int, cache_len: int, k: int,
                   sampling: SamplingParams) -> Program:
  """The target over K+1 positions with the rejection sampler, as in one verification round."""
  graphdef, args = _common_args(mesh, config, batch, k + 1, cache_len)
  q = jax.ShapeDtypeStruct((batch, k, config.vocab_size), jnp.float32, sharding=batch_sharding(mesh, batch, 3))
  spec = TargetSpec(graphdef=graphdef, mesh=mesh, kernels=False)
  return Program(f"verify_k{k}", "target", config, k + 1, k, _verify(spec, sampling), args + (q,))


def tree_verify_program(mesh: Mesh, config: ModelConfig, batch: int, cache_len: int, tree: StaticTree,
                        sampling: SamplingParams) -> Program:
  """The target over the root + N nodes of `tree` with exact tree acceptance, as in one tree round; q (the draft's
  distribution at each of the N + 1 contexts) is an argument only where the rule reads it (branching="sample")."""
  n = tree.n_nodes
  graphdef, args = _common_args(mesh, config, batch, n + 1, cache_len)
  if tree.branching == "sample" and not sampling.greedy:
    args += (jax.ShapeDtypeStruct((batch, n + 1, config.vocab_size), jnp.float32,
                                  sharding=batch_sharding(mesh, batch, 3)),)
  spec = TargetSpec(graphdef=graphdef, mesh=mesh, kernels=False)
  return Program(f"tree_verify_n{n}", "target", config, n + 1, n, _tree_verify(spec, sampling, tree, config.vocab_size),
                 args)
