"""`generate`: validate inputs on the host, bucket shapes, run the compiled program, decode results."""

import dataclasses
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.cache import cache_size
from specjax.drafters.base import Drafter
from specjax.engine import generate_program
from specjax.calibration import calibrate_round_cost
from specjax.distributed import host_values
from specjax.model import Model
from specjax.policy import SpeculationPolicy
from specjax.sampling import SamplingParams
from specjax.stats import GenerationStats, summarize

MIN_PROMPT_BUCKET = 16


@dataclasses.dataclass
class GenerationResult:
  tokens: list[list[int]]          # new token ids per row (EOS included when it stopped the row)
  texts: list[str] | None          # decoded new tokens, when the target has a tokenizer
  stats: GenerationStats
  prompt_tokens: list[list[int]]


def prompt_bucket(length: int) -> int:
  """Prompt lengths are padded to powers of two (at least 16) to bound recompiles."""
  return max(MIN_PROMPT_BUCKET, 1 << (length - 1).bit_length())


def pack_batch(prompt_ids: list[list[int]], size: int, max_new_tokens: int):
  """Host arrays the compiled program takes: left-aligned tokens [B, size], prompt lengths, budgets."""
  tokens_BxS = np.zeros((len(prompt_ids), size), np.int32)
  for row, ids in enumerate(prompt_ids):
    tokens_BxS[row, :len(ids)] = ids
  prompt_len_B = np.array([len(ids) for ids in prompt_ids], np.int32)
  return tokens_BxS, prompt_len_B, np.full((len(prompt_ids),), max_new_tokens, np.int32)


def unpack_new_tokens(tokens_BxS, prompt_len_B, n_new_B) -> list[list[int]]:
  """Each row's generated tokens, read back from the program's token buffer."""
  return [tokens_BxS[b, prompt_len_B[b]:prompt_len_B[b] + n_new_B[b]].tolist() for b in range(len(n_new_B))]


def encode_prompts(target: Model, prompts, chat: bool) -> list[list[int]]:
  if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence) or not prompts:
    raise ValueError("prompts must be a non-empty list of strings or of token-id lists")
  vocab = target.config.vocab_size
  encoded = []
  for i, prompt in enumerate(prompts):
    if isinstance(prompt, str):
      if target.tokenizer is None:
        raise ValueError("string prompts need a model with a tokenizer; pass token-id lists instead")
      ids = target.tokenizer.apply_chat_template(prompt) if chat else target.tokenizer.encode(prompt)
    else:
      if chat:
        raise ValueError("chat=True needs string prompts")
      try:
        values = np.asarray(prompt).reshape(-1).tolist() if len(prompt) else []
      except (TypeError, ValueError) as error:
        raise ValueError(f"prompt {i} is neither a string nor a list of token ids: {error}") from None
      if any(isinstance(t, bool) or not isinstance(t, int) for t in values):
        raise ValueError(f"prompt {i} holds non-integer token ids")
      ids = values
    if not ids:
      raise ValueError(f"prompt {i} is empty")
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
      raise ValueError(f"prompt {i} has token ids outside the vocabulary [0, {vocab}): {bad[:5]}")
    encoded.append(ids)
  return encoded


def check_k(k, drafter):
  """0 without a drafter; else an int K or a SpeculationPolicy ("auto" = the default policy)."""
  if drafter is None:
    return 0
  if isinstance(k, str) and k == "auto":
    k = SpeculationPolicy(ks=tuple(x for x in SpeculationPolicy().ks if x <= drafter.max_k))
  if isinstance(k, SpeculationPolicy):
    if k.max_k > drafter.max_k:
      raise ValueError(f"policy K={k.max_k} exceeds what {type(drafter).__name__} allows (max_k={drafter.max_k})")
    return k
  if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
    raise ValueError(f"k must be an int >= 1, 'auto' or a SpeculationPolicy, got {k!r}")
  if k < 1:
    raise ValueError(f"k must be >= 1 for speculative decoding, got {k}")
  if k > drafter.max_k:
    raise ValueError(f"k={k} exceeds what {type(drafter).__name__} allows (max_k={drafter.max_k})")
  return int(k)


def check_drafter(target: Model, drafter) -> None:
  if drafter is None:
    return
  if not isinstance(drafter, Drafter):
    raise TypeError(f"drafter must be a specjax.drafters.Drafter, got {type(drafter).__name__}")
  if drafter.vocab_size is not None and drafter.vocab_size != target.config.vocab_size:
    raise ValueError(f"drafter vocabulary size {drafter.vocab_size} differs from the target's "
                     f"{target.config.vocab_size}; draft and target must share one vocabulary")


_COSTS: dict = {}


def policy_costs(target_params, drafter_params, host_inputs, policy, program) -> np.ndarray:
  """Round costs for this policy, program and batch shape: measured once per process, then reused."""
  key = (policy, tuple(sorted(program.items(), key=lambda kv: kv[0])), host_inputs[0].shape)
  if key not in _COSTS:
    _COSTS[key] = calibrate_round_cost(target_params, drafter_params, host_inputs, policy=policy, **program)
  return _COSTS[key]


def generate(target: Model, prompts, *, max_new_tokens: int, sampling: SamplingParams = SamplingParams(),
             seed: int = 0, drafter: Drafter | None = None, k: "int | str | SpeculationPolicy" = 4, stop_at_eos: bool = True, mesh=None,
             chat: bool = False) -> GenerationResult:
  """Generates up to max_new_tokens per prompt: autoregressive without a drafter, speculative with one.

  k: drafts per round, or "auto" / a SpeculationPolicy to pick K (0 included) every round from the measured
  acceptance and the round costs measured on this machine the first time a shape is seen.
  """
  if not isinstance(target, Model):
    raise TypeError(f"target must be a specjax Model, got {type(target).__name__}")
  if not isinstance(sampling, SamplingParams):
    raise TypeError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
  if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
    raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
  check_drafter(target, drafter)
  k = check_k(k, drafter)
  if mesh is not None:
    from specjax.sharding import check_mesh
    check_mesh(mesh)
  prompt_ids = encode_prompts(target, prompts, chat)
  longest = max(len(p) for p in prompt_ids)
  max_k = k.max_k if isinstance(k, SpeculationPolicy) else k
  needed = longest + max_new_tokens + max_k
  limits = [("target", target.config.max_seq_len)]
  if drafter is not None and drafter.max_seq_len:
    limits.append(("drafter", drafter.max_seq_len))
  for who, limit in limits:
    if needed > limit:
      raise ValueError(f"prompt length {longest} + max_new_tokens {max_new_tokens} + k {max_k} = {needed} exceeds the "
                       f"{who}'s max_seq_len {limit}")
  bucket = prompt_bucket(longest)
  size = cache_size(max(bucket, needed))
  batch = len(prompt_ids)
  tokens_BxS, prompt_len_B, max_new_B = pack_batch(prompt_ids, size, max_new_tokens)
  eos_ids = tuple(target.config.eos_token_ids) if stop_at_eos else ()

  target_params, drafter_params = target.params, (drafter.params() if drafter else ())
  inputs = (jnp.asarray(tokens_BxS), jnp.asarray(prompt_len_B), jnp.asarray(max_new_B))
  if mesh is not None:
    from specjax.sharding import place_for_generation
    target_params, drafter_params, inputs = place_for_generation(mesh, target, drafter, inputs)
  program = dict(graphdef=target.graphdef, drafter=drafter, sampling=sampling, eos_ids=eos_ids, prompt_bucket=bucket,
                 mesh=mesh)
  policy_inputs = ()
  if isinstance(k, SpeculationPolicy):
    policy_inputs = (jnp.asarray(policy_costs(target_params, drafter_params, (tokens_BxS, prompt_len_B), k,
                                              program)), jnp.int32(-1))
  start, timings = time.perf_counter(), {}
  state = generate_program(target_params, drafter_params, *inputs, jax.random.key(seed), k=k, timings=timings,
                           policy_inputs=policy_inputs, **program)
  tokens_BxS, n_new_B, rounds, accepted, k_R = host_values(
      (state.tokens_BxS, state.n_new_B, state.round, state.accepted_RxB, state.k_R))
  elapsed = time.perf_counter() - start
  new_tokens = unpack_new_tokens(tokens_BxS, prompt_len_B, n_new_B)
  texts = ([target.tokenizer.decode(t, skip_special_tokens=True) for t in new_tokens]
           if target.tokenizer is not None else None)
  stats = summarize(accepted, n_new_B, int(rounds), max_k, elapsed, timings["first_token_s"], k_R)
  return GenerationResult(tokens=new_tokens, texts=texts, stats=stats, prompt_tokens=prompt_ids)
