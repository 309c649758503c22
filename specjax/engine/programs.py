"""The compiled programs, each with one static spec: the prefill program (prompt -> first token), the decode
program (the drafter's prefill and every round in one `lax.while_loop`) and the target's scoring call alone.

Autoregressive decoding is the same round with K = 0 (no drafter): the target scores one position and the
rejection sampler reduces to sampling from p. Prefill is its own program because it depends only on the
`PrefillSpec` (batch, prompt bucket, sampling, feature layers): every method and K at that shape share one
compilation, and its time is the time to first token. This module is the one place that merges the target's graph
with its parameters and routes kernels.
"""

import contextlib
import functools
import time

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.engine.adaptive import adaptive_round
from specjax.cache import init_cache
from specjax.drafters.base import TargetFeatures
from specjax.engine.round import init_drafter, prefill, score, speculative_round, target_features, tree_round
from specjax.engine.state import DecodeState, row_keys, unfinished
from specjax.kernels.linear import bf16_gemm, use_kernels
from specjax.kernels.packed import packed_params
from specjax.policy import PolicyInputs, init_policy_state
from specjax.spec import DecodeSpec, PrefillSpec, TargetSpec
from specjax.trees.layout import tree_layout


@contextlib.contextmanager
def traced(spec, target_params):
  """The target module of `spec` (a Target-, Prefill- or DecodeSpec: the graph merged with the parameters) under
  the spec's kernel routing (and a TargetSpec's `bf16_gemm`), for tracing."""
  with use_kernels(spec.kernels), bf16_gemm(getattr(spec, "bf16_gemm", False)):
    yield nnx.merge(spec.graphdef, target_params)


def params_for(target, spec):
  """The target's parameters as the programs of `spec` (any Target-, Prefill- or DecodeSpec) run them: with the
  kernels on (unsharded), the packed view of `specjax.kernels.packed` (made once per Model), else as they are."""
  return packed_params(target) if spec.kernels else target.params


@functools.partial(jax.jit, static_argnames=("spec",), donate_argnames=("tokens_BxS",))
def prefill_program(target_params, tokens_BxS, prompt_len_B, max_new_B, seed_key, *, spec: PrefillSpec) -> DecodeState:
  """The prompt through the target and each row's first token, as one program."""
  with traced(spec, target_params) as target:
    return prefill(target, tokens_BxS, prompt_len_B, max_new_B, row_keys(seed_key, tokens_BxS.shape[0]), spec=spec,
                   max_rounds=tokens_BxS.shape[1])


@functools.partial(jax.jit, static_argnames=("spec",), donate_argnames=("state",))
def decode_program(target_params, drafter_params, state: DecodeState, prompt_len_B, max_new_B,
                   policy_inputs: PolicyInputs | None = None, *, spec: DecodeSpec) -> DecodeState:
  """The drafter's prefill, then rounds until every row is done, as one program. An adaptive spec (K chosen per
  round by a SpeculationPolicy) needs `policy_inputs`: the measured round costs (`specjax.calibration`)."""
  with traced(spec, target_params) as target:
    state = init_drafter(spec.drafter, drafter_params, state, prompt_len_B, spec.prompt_bucket)
    if spec.adaptive:
      if policy_inputs is None:
        raise ValueError("an adaptive DecodeSpec needs policy_inputs (PolicyInputs with the measured round costs)")
      state = state.replace(policy=init_policy_state(spec.k, policy_inputs.round_cost_N))
    elif spec.tree is not None:
      log_RxBxD1 = (state.accepted_RxB.shape[0], state.accepted_RxB.shape[1], spec.tree.max_depth + 1)
      state = state.replace(tree_rank_RxBxD1=jnp.full(log_RxBxD1, -1, jnp.int32),
                            tree_children_RxBxD1=jnp.zeros(log_RxBxD1, jnp.int32))
    body = round_body(target, spec, drafter_params, max_new_B, policy_inputs)
    return jax.lax.while_loop(unfinished, lambda state: body(state=state), state)


def round_body(target, spec: DecodeSpec, drafter_params, max_new_B, policy_inputs: PolicyInputs | None = None):
  """The round of `spec` as a function of the state: the adaptive round (with `policy_inputs`), a token tree's
  round, or a chain of K drafts (K = 0: an autoregressive step)."""
  if spec.adaptive:
    return functools.partial(adaptive_round, target, spec.drafter, drafter_params, max_new_B=max_new_B,
                             inputs=policy_inputs, policy=spec.k, sampling=spec.sampling, eos_ids=spec.eos_ids)
  if spec.tree is not None:
    return functools.partial(tree_round, target, spec.drafter, drafter_params, max_new_B=max_new_B, tree=spec.tree,
                             sampling=spec.sampling, eos_ids=spec.eos_ids)
  return functools.partial(speculative_round, target, spec.drafter, drafter_params, max_new_B=max_new_B, k=spec.k,
                           sampling=spec.sampling, eos_ids=spec.eos_ids)


def score_call(target_params, tokens_BxT, positions_BxT, cache, parent_BxN=None, *, spec: TargetSpec):
  """The target's scoring call alone, (logits, cache), as a pure function of its arrays: what verification runs,
  for callers that jit it with their own shardings (`sharding.sharded_verify`) or lower it (AOT). With parent_BxN
  (a token tree's parents) the T = N + 1 positions are the tree's slots from its root, as a tree round scores."""
  with traced(spec, target_params) as target:
    tree = None if parent_BxN is None else tree_layout(parent_BxN, positions_BxT[:, 0])
    logits, cache, _ = score(target, tokens_BxT, positions_BxT, cache, tree=tree)
    return logits, cache


score_program = jax.jit(score_call, static_argnames=("spec",), donate_argnames=("cache",))


@functools.partial(jax.jit, static_argnames=("spec", "layer_ids"))
def features_program(target_params, tokens_BxT, *, spec: TargetSpec, layer_ids: tuple) -> TargetFeatures:
  """Teacher forcing: the target over whole sequences from an empty cache, and their TargetFeatures (final hidden
  states and the residual stream after `layer_ids`), what trained drafters learn from."""
  with traced(spec, target_params) as target:
    batch, t_len = tokens_BxT.shape
    positions_BxT = jnp.broadcast_to(jnp.arange(t_len, dtype=jnp.int32), (batch, t_len))
    _, _, features = target_features(target, tokens_BxT, positions_BxT, init_cache(target.config, batch, t_len),
                                     tuple(layer_ids))
    return features


def prefill_for(target_params, tokens_BxS, prompt_len_B, max_new_B, seed_key, *, spec: DecodeSpec) -> DecodeState:
  """The prefill program of a decode spec (keeping the target features its drafter starts from)."""
  return prefill_program(target_params, tokens_BxS, prompt_len_B, max_new_B, seed_key, spec=spec.prefill)


def run(target_params, drafter_params, tokens_BxS, prompt_len_B, max_new_B, seed_key, *, spec: DecodeSpec,
        policy_inputs: PolicyInputs | None = None, timings: dict | None = None) -> DecodeState:
  """The whole generation on device arrays: the prefill program, then the decode program. With `timings`, waits
  for the first tokens and records `first_token_s` (time to first token, compilation included on a first call)."""
  start = time.perf_counter()
  state = prefill_for(target_params, tokens_BxS, prompt_len_B, max_new_B, seed_key, spec=spec)
  if timings is not None:
    jax.block_until_ready(state.n_new_B)
    timings["first_token_s"] = time.perf_counter() - start
  return decode_program(target_params, drafter_params, state, prompt_len_B, max_new_B, policy_inputs, spec=spec)
