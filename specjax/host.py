"""The host side of every generation, in one place: validate a request and pack it into a batch (`prepare`), run
the compiled programs on it (`run_batch`), read the results back. `generate`, the benchmark, calibration and the
scripts all go through these, so every check lives here once."""

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax import engine
from specjax.cache import cache_layout, cache_size
from specjax.calibration import Calibration
from specjax.distributed import host_values
from specjax.drafters.base import Drafter
from specjax.policy import SpeculationPolicy
from specjax.sampling import SamplingParams
from specjax.spec import DecodeSpec

MIN_PROMPT_BUCKET = 16
DEFAULT_K = 4


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


def check_drafter(target, drafter) -> None:
  if drafter is None:
    return
  if not isinstance(drafter, Drafter):
    raise TypeError(f"drafter must be a specjax.drafters.Drafter, got {type(drafter).__name__}")
  if drafter.vocab_size is not None and drafter.vocab_size != target.config.vocab_size:
    raise ValueError(f"drafter vocabulary size {drafter.vocab_size} differs from the target's "
                     f"{target.config.vocab_size}; draft and target must share one vocabulary")
  draft_config = getattr(getattr(drafter, "model", None), "config", None)
  layout = None if draft_config is None else cache_layout(draft_config)
  if drafter.shares_target_cache and layout != cache_layout(target.config):
    raise ValueError(f"{type(drafter).__name__} drafts in the target's KV cache, but its cache layout (layers, KV "
                     f"heads, head dim, dtype) {layout} is not the target's {cache_layout(target.config)}; build it "
                     f"with shares_target_cache=False")


def check_k(k, drafter):
  """K of the spec: 0 without a drafter; with one, an int K or a SpeculationPolicy ("auto" = the default policy
  within the drafter's max_k; None = DEFAULT_K)."""
  if drafter is None:
    if k is None or (isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k == 0):
      return 0
    raise ValueError(f"k={k!r} needs a drafter: pass drafter=... (e.g. specjax.drafters.PromptLookup()), or leave "
                     f"k unset for autoregressive decoding")
  if k is None:
    k = min(DEFAULT_K, drafter.max_k)
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


def check_tree(tree, drafter, k) -> int:
  """K of a tree's spec, its node count, after the checks: a StaticTree or DynamicTree, a drafter that branches
  that deep, k unset or N."""
  from specjax.trees import TREES
  if not isinstance(tree, TREES):
    raise TypeError(f"tree must be a specjax.StaticTree or specjax.DynamicTree, got {type(tree).__name__}")
  if drafter is None:
    raise ValueError("a tree of drafts needs a drafter (e.g. specjax.drafters.DraftModel(small_model))")
  if not drafter.branches:
    raise ValueError(f"{type(drafter).__name__} cannot draft a tree (it proposes one continuation)")
  if k is not None and k != tree.n_nodes:
    raise ValueError(f"with a tree, each round verifies its {tree.n_nodes} nodes: leave k unset (got k={k!r})")
  if drafter.max_tree_depth is not None and tree.max_depth > drafter.max_tree_depth:
    raise ValueError(f"the tree is {tree.max_depth} levels deep; {type(drafter).__name__} drafts at most "
                     f"{drafter.max_tree_depth}")
  return tree.n_nodes


def check_lengths(target, drafter, longest: int, max_new_tokens: int, max_k: int) -> int:
  """Positions the longest row needs (prompt + new tokens + drafts); a clear error when the target or the drafter
  cannot hold them."""
  needed = longest + max_new_tokens + max_k
  limits = [("target", target.config.max_seq_len)]
  if drafter is not None and drafter.max_seq_len:
    limits.append(("drafter", drafter.max_seq_len))
  for who, limit in limits:
    if needed > limit:
      raise ValueError(f"prompt length {longest} + max_new_tokens {max_new_tokens} + k {max_k} = {needed} exceeds the "
                       f"{who}'s max_seq_len {limit}")
  return needed


@dataclasses.dataclass(frozen=True)
class PreparedBatch:
  """A validated request: the decode spec and the host arrays of its batch."""

  spec: DecodeSpec
  prompt_ids: list
  tokens_BxS: np.ndarray
  prompt_len_B: np.ndarray
  max_new_B: np.ndarray


def prepare(target, prompt_ids: list[list[int]], *, max_new_tokens: int, sampling: SamplingParams = SamplingParams(),
            drafter: Drafter | None = None, k=None, stop_at_eos: bool = True, mesh=None, min_prompt_bucket: int = 0,
            min_cache_size: int = 0, tree=None) -> PreparedBatch:
  """Every check of a request, then its spec and packed batch. prompt_ids: token ids per row (see
  `generate.encode_prompts`); min_prompt_bucket / min_cache_size raise the shapes (a benchmark shares them across
  calls, so that one program serves many batches); tree: a `specjax.StaticTree` or `DynamicTree` of drafts per
  round."""
  from specjax.model import Model
  if not isinstance(target, Model):
    raise TypeError(f"target must be a specjax Model, got {type(target).__name__}")
  if not isinstance(sampling, SamplingParams):
    raise TypeError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
  if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
    raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
  check_drafter(target, drafter)
  k = check_k(k, drafter) if tree is None else check_tree(tree, drafter, k)
  if mesh is not None:
    from specjax.sharding import check_mesh
    check_mesh(mesh)
  longest = max(len(p) for p in prompt_ids)
  max_k = k.max_k if isinstance(k, SpeculationPolicy) else k if tree is None else tree.slots
  needed = check_lengths(target, drafter, longest, max_new_tokens, max_k)
  bucket = max(min_prompt_bucket, prompt_bucket(longest))
  size = cache_size(max(bucket, needed, min_cache_size))
  spec = DecodeSpec(graphdef=target.graphdef, drafter=drafter, sampling=sampling, k=k,
                    eos_ids=tuple(target.config.eos_token_ids) if stop_at_eos else (), prompt_bucket=bucket,
                    mesh=mesh, kernels=mesh is None, tree=tree)
  return PreparedBatch(spec, [list(p) for p in prompt_ids], *pack_batch(prompt_ids, size, max_new_tokens))


@dataclasses.dataclass
class BatchOutput:
  """What a run of the programs gives back, on the host."""

  tokens: list[list[int]]      # new token ids per row
  n_new_B: np.ndarray
  rounds: int
  accepted_RxB: np.ndarray     # [rounds, batch]; -1 where the row was done
  k_R: np.ndarray              # [rounds]
  wall_s: float                # the whole call (calibration excluded, compilation included on a first call)
  first_token_s: float
  tree_rank_RxBxD1: np.ndarray | None = None      # token trees: `engine.state.DecodeState`'s rank log
  tree_children_RxBxD1: np.ndarray | None = None


def run_batch(target, batch: PreparedBatch, *, seed: int = 0, calibration: Calibration | None = None,
              max_new_tokens: int | None = None) -> BatchOutput:
  """Runs the prefill and decode programs on a prepared batch. An adaptive spec takes its round costs from
  `calibration` (measured there on first use of this spec and shape). max_new_tokens lowers the batch's budget
  (the benchmark's compiling call stops after one token at the real shapes)."""
  spec, drafter = batch.spec, batch.spec.drafter
  max_new_B = batch.max_new_B if max_new_tokens is None else np.minimum(batch.max_new_B, max_new_tokens)
  target_params, drafter_params = engine.params_for(target, spec), (drafter.params() if drafter is not None else ())
  inputs = (jnp.asarray(batch.tokens_BxS), jnp.asarray(batch.prompt_len_B), jnp.asarray(max_new_B))
  if spec.mesh is not None:
    from specjax.sharding import place_for_generation
    target_params, drafter_params, inputs = place_for_generation(spec.mesh, target, drafter, inputs)
  policy_inputs = None
  if spec.adaptive:
    policy_inputs = (calibration or Calibration()).policy_inputs(target_params, drafter_params, batch.tokens_BxS,
                                                                 batch.prompt_len_B, spec)
  start, timings = time.perf_counter(), {}
  state = engine.run(target_params, drafter_params, *inputs, jax.random.key(seed), spec=spec,
                     policy_inputs=policy_inputs, timings=timings)
  tokens_BxS, n_new_B, rounds, accepted, k_R, tree_log = host_values(
      (state.tokens_BxS, state.n_new_B, state.round, state.accepted_RxB, state.k_R,
       (state.tree_rank_RxBxD1, state.tree_children_RxBxD1)))
  wall = time.perf_counter() - start
  rounds = int(rounds)
  ranks, children = (log[:rounds] if not isinstance(log, tuple) else None for log in tree_log)
  return BatchOutput(tokens=unpack_new_tokens(tokens_BxS, batch.prompt_len_B, n_new_B), n_new_B=n_new_B,
                     rounds=rounds, accepted_RxB=accepted[:rounds], k_R=k_R[:rounds], wall_s=wall,
                     first_token_s=timings["first_token_s"], tree_rank_RxBxD1=ranks, tree_children_RxBxD1=children)
