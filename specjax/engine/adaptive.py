"""The adaptive round: autoregressive steps while the policy says speculation does not pay, then one speculative
round at the K it picks (`specjax.policy`)."""

import functools

import jax
import jax.numpy as jnp

from specjax.engine.round import speculative_round
from specjax.engine.state import DecodeState, unfinished
from specjax.policy import PolicyInputs, SpeculationPolicy, choose_branch, update_policy_state


def adaptive_round(target, drafter, drafter_params, state: DecodeState, max_new_B, inputs: PolicyInputs, *,
                   policy: SpeculationPolicy, sampling, eos_ids: tuple) -> DecodeState:
  """The autoregressive steps the policy picks in a row, then (unless the generation ended) one speculative round
  at the K it picks. The steps run as their own loop with the plain autoregressive body, so that speculation
  turned off costs what autoregressive decoding costs; only a speculative round goes through the `lax.switch`.
  A round is also autoregressive when the drafter expects no active row to be worth verifying
  (`Drafter.worth_verifying`), unless a branch is forced (calibration)."""
  def choice(state):
    tokens_left = jnp.max(jnp.where(state.done_B, 0, max_new_B - state.n_new_B))
    return choose_branch(policy, state.policy, inputs, state.policy.rounds, tokens_left)

  def wants_autoregressive(state):
    return unfinished(state) & ((choice(state) == 0) | ~some_row_worth_verifying(state))

  def some_row_worth_verifying(state):
    worth_B = drafter.worth_verifying(drafter_params, state.draft_state, state.tokens_BxS, state.seq_len_B)
    if worth_B is None:
      return jnp.bool_(True)
    return jnp.any(worth_B & ~state.done_B) | (inputs.forced_branch >= 0)

  def round_at(branch, k, state):
    new_state = speculative_round(target, drafter, drafter_params, state, max_new_B, k=k, sampling=sampling,
                                  eos_ids=eos_ids)
    n_accepted_B = jnp.maximum(new_state.accepted_RxB[state.round], 0)
    return new_state.replace(policy=update_policy_state(policy, state.policy, branch, jnp.int32(k), n_accepted_B,
                                                        ~state.done_B, inputs.round_cost_N))

  state = jax.lax.while_loop(wants_autoregressive, functools.partial(round_at, jnp.int32(0), 0), state)
  branch = jnp.where(unfinished(state), choice(state), 0)
  # Branch 0 is reached only when the generation has ended (or calibration forces it): then nothing runs.
  branches = [lambda state: state] + [functools.partial(round_at, jnp.int32(i + 1), k)
                                      for i, k in enumerate(policy.ks)]
  return jax.lax.switch(branch, branches, state)
