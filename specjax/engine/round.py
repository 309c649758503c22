"""The phases of one round, each once: the target call, prefill, drafter init, draft, verify, accept/commit.

Every caller composes these: the fused decode loop (`engine.programs`), the phase-split benchmark, the paired
verification cost, the AOT programs and the sharded verification call. Only this package imports the rejection
sampler and routes kernels.
"""

import jax
import jax.numpy as jnp

from specjax.cache import init_cache
from specjax.drafters.base import TargetFeatures
from specjax.engine.state import DecodeState, budget_spent, empty_round_log, is_eos, round_keys
from specjax.rejection import accept, accept_greedy
from specjax.sampling import distribution, draw_tokens, greedy_tokens
from specjax.trees.layout import compact_path, tree_layout
from specjax.trees.ranks import path_ranks
from specjax.trees.rejection import accept_tree, accept_tree_greedy

# Positions per target call of a long prompt's prefill (`prompt_pass`).
PREFILL_CHUNK = 128


def target_features(target, tokens_BxT, positions_BxT, cache, feature_layers, tree=None):
  """Final hidden states, updated cache and (when feature_layers is not None) the TargetFeatures of these
  positions: what the target computes for T positions per row at their own offsets (with `tree`, a TreeLayout:
  a token tree's slots)."""
  hidden, cache, collected = target.hidden_states(tokens_BxT, positions_BxT, cache,
                                                  collect_layers=tuple(feature_layers or ()), tree=tree)
  features = None
  if feature_layers is not None:
    layers = (jnp.stack(collected, axis=2) if collected
              else jnp.zeros(hidden.shape[:2] + (0, hidden.shape[2]), hidden.dtype))
    features = TargetFeatures(hidden_BxTxD=hidden, layers_BxTxLxD=layers)
  return hidden, cache, features


def score(target, tokens_BxT, positions_BxT, cache, feature_layers=None, tree=None):
  """THE target call of a round: float32 logits of T positions per row, the cache with them written, and their
  TargetFeatures when feature_layers is not None. Verification runs it over [last token, d_1..d_K] (or, with
  `tree`, a TreeLayout, over [last token] + a token tree's nodes); an autoregressive step is the same call over one
  position."""
  hidden, cache, features = target_features(target, tokens_BxT, positions_BxT, cache, feature_layers, tree)
  return target.logits(hidden), cache, features


def sample_tokens(keys_B, logits_BxV, sampling):
  """(token_B, probs_BxV): one token per row from the sampling distribution of its logits (the rule target and
  draft share), and that distribution."""
  return draw_tokens(keys_B, logits_BxV, sampling)


def accept_drafts(logits_BxK1xV, q_BxKxV, draft_BxK, keys_B, sampling):
  """(n_accepted_B, next_token_B): modified rejection sampling of the drafts against the target's logits (exact
  greedy verification at temperature 0, from the target's argmax ids alone)."""
  if sampling.greedy:
    return accept_greedy(greedy_tokens(logits_BxK1xV), draft_BxK)
  p_BxK1xV = distribution(logits_BxK1xV, sampling)
  return accept(p_BxK1xV, q_BxKxV, draft_BxK, keys_B)


def prompt_pass(target, tokens_BxS, prompt_len_B, cache, bucket: int, feature_layers):
  """The prompt bucket through the target: each row's hidden state at its last prompt token [B, D], the cache, and
  the bucket's TargetFeatures (None without feature_layers). A bucket longer than PREFILL_CHUNK runs chunk by chunk,
  only as many chunks as the longest prompt needs: a 710-token prompt computes 768 positions, not its bucket's
  1024, and a chunk's attention scores stay [chunk, cache] instead of [bucket, bucket] (SmolLM2 on 2 cores: 2.5 s
  against 5.7 s)."""
  batch = tokens_BxS.shape[0]
  rows_B = jnp.arange(batch)
  if bucket <= PREFILL_CHUNK:
    positions_BxT = jnp.broadcast_to(jnp.arange(bucket, dtype=jnp.int32), (batch, bucket))
    hidden, cache, features = target_features(target, tokens_BxS[:, :bucket], positions_BxT, cache, feature_layers)
    return hidden[rows_B, prompt_len_B - 1], cache, features
  chunk = PREFILL_CHUNK
  last_chunk_B, last_offset_B = (prompt_len_B - 1) // chunk, (prompt_len_B - 1) % chunk
  offsets_1xC = jnp.arange(chunk, dtype=jnp.int32)[None, :]

  def body(carry):
    i, last_BxD, cache, features = carry
    start = i * chunk
    tokens_BxC = jax.lax.dynamic_slice_in_dim(tokens_BxS, start, chunk, axis=1)
    positions_BxC = jnp.broadcast_to(start + offsets_1xC, (batch, chunk))
    hidden, cache, chunk_features = target_features(target, tokens_BxC, positions_BxC, cache, feature_layers)
    last_BxD = jnp.where((last_chunk_B == i)[:, None], hidden[rows_B, last_offset_B], last_BxD)
    if features is not None:
      features = jax.tree.map(lambda all_, part: jax.lax.dynamic_update_slice_in_dim(all_, part, start, axis=1),
                              features, chunk_features)
    return i + 1, last_BxD, cache, features

  hidden_shape, _, feature_shapes = jax.eval_shape(
      lambda c: target_features(target, tokens_BxS[:, :chunk], jnp.zeros((batch, chunk), jnp.int32), c, feature_layers),
      cache)
  features = None if feature_shapes is None else jax.tree.map(
      lambda x: jnp.zeros((x.shape[0], bucket) + x.shape[2:], x.dtype), feature_shapes)
  last_BxD = jnp.zeros((batch, hidden_shape.shape[-1]), hidden_shape.dtype)
  chunks = (jnp.max(prompt_len_B) + chunk - 1) // chunk
  _, last_BxD, cache, features = jax.lax.while_loop(lambda carry: carry[0] < chunks, body,
                                                    (jnp.int32(0), last_BxD, cache, features))
  return last_BxD, cache, features


def prefill(target, tokens_BxS, prompt_len_B, max_new_B, row_keys_B, *, spec, max_rounds: int) -> DecodeState:
  """Runs the prompt bucket through the target and samples each row's first new token (no drafter state yet).
  spec: a PrefillSpec."""
  batch, size = tokens_BxS.shape
  rows_B = jnp.arange(batch)
  cache = init_cache(target.config, batch, size)
  if spec.mesh is not None:
    from specjax.sharding import cache_sharding
    cache = jax.lax.with_sharding_constraint(cache, cache_sharding(spec.mesh, target.config, batch))
  last_BxD, cache, features = prompt_pass(target, tokens_BxS, prompt_len_B, cache, spec.prompt_bucket,
                                          spec.feature_layers)
  logits_BxV = target.logits(last_BxD)
  keys_B = jax.vmap(lambda key: jax.random.fold_in(key, 0))(row_keys_B)
  first_B, _ = sample_tokens(keys_B, logits_BxV, spec.sampling)
  n_new_B = jnp.ones((batch,), jnp.int32)
  return DecodeState(
      tokens_BxS=tokens_BxS.at[rows_B, prompt_len_B].set(first_B),
      seq_len_B=prompt_len_B + 1,
      n_new_B=n_new_B,
      done_B=budget_spent(n_new_B, max_new_B) | is_eos(first_B, spec.eos_ids),
      cache=cache.with_lengths(prompt_len_B),
      draft_state=(),
      row_keys_B=row_keys_B,
      **empty_round_log(max_rounds, batch),
      prompt_features=features if features is not None else (),
  )


def init_drafter(drafter, drafter_params, state: DecodeState, prompt_len_B, prompt_bucket: int) -> DecodeState:
  """The drafter's own prefill (e.g. its KV cache), from the prompt and the target's prompt features; none for a
  drafter that drafts in the target's cache (`Drafter.shares_target_cache`)."""
  if drafter is None:
    return state
  if drafter.shares_target_cache:
    return state.replace(prompt_features=())
  features = state.prompt_features if drafter.feature_layers is not None else None
  return state.replace(draft_state=drafter.init(drafter_params, state.tokens_BxS, prompt_len_B, prompt_bucket,
                                                features=features), prompt_features=())


def drafting_state(drafter, state: DecodeState):
  """What the drafter drafts from: its own state, or the target's KV cache (`Drafter.shares_target_cache`)."""
  return state.cache if drafter.shares_target_cache else state.draft_state


def after_drafting(drafter, state: DecodeState, drafted) -> DecodeState:
  """`state` holding the drafter's new state: its own, or the target's cache with the draft's entries (at positions
  the verification then writes again)."""
  return state.replace(cache=drafted) if drafter.shares_target_cache else state.replace(draft_state=drafted)


def draft(drafter, drafter_params, state: DecodeState, *, k: int, sampling, vocab_size: int):
  """K proposals per row, their q (one-hot for deterministic drafters; both empty when k == 0) and the state with
  the drafter's new state in it (`after_drafting`), which the verification then reads."""
  batch = state.tokens_BxS.shape[0]
  if k == 0:
    if drafter is not None:
      state = after_drafting(drafter, state, drafter.observe(drafter_params, drafting_state(drafter, state),
                                                             state.tokens_BxS, state.seq_len_B))
    return jnp.zeros((batch, 0), jnp.int32), jnp.zeros((batch, 0, vocab_size), jnp.float32), state
  draft_keys, _ = round_keys(state)
  draft_BxK, q_BxKxV, drafted = drafter.propose(drafter_params, drafting_state(drafter, state), state.tokens_BxS,
                                                state.seq_len_B, k, sampling, draft_keys)
  if q_BxKxV is None:
    q_BxKxV = jax.nn.one_hot(draft_BxK, vocab_size, dtype=jnp.float32)
  return draft_BxK.astype(jnp.int32), q_BxKxV, after_drafting(drafter, state, drafted)


def verify_inputs(state: DecodeState, draft_BxK):
  """Tokens [last token, d_1..d_K] and their positions at each row's own offset."""
  batch, k = draft_BxK.shape
  last_B = state.tokens_BxS[jnp.arange(batch), state.seq_len_B - 1]
  inputs_BxK1 = jnp.concatenate([last_B[:, None], draft_BxK], axis=1)
  positions_BxK1 = state.seq_len_B[:, None] - 1 + jnp.arange(k + 1, dtype=jnp.int32)[None, :]
  return inputs_BxK1, positions_BxK1


def verify(target, state: DecodeState, draft_BxK: jax.Array, feature_layers=None):
  """ONE target call over the K+1 positions: logits, the cache with them written, and their TargetFeatures."""
  return score(target, *verify_inputs(state, draft_BxK), state.cache, feature_layers)


def accept_and_commit(drafter, drafter_params, state: DecodeState, logits_BxK1xV, q_BxKxV, draft_BxK, cache,
                      draft_state, max_new_B, *, sampling, eos_ids: tuple, features=None) -> DecodeState:
  """Rejection sampling, then per-row commit: tokens, lengths (the cache rollback), stops and the round log."""
  _, accept_keys = round_keys(state)
  n_accepted_B, next_B = accept_drafts(logits_BxK1xV, q_BxKxV, draft_BxK, accept_keys, sampling)
  return commit(drafter, drafter_params, state, draft_BxK, n_accepted_B, next_B, cache, draft_state, max_new_B,
                proposed=draft_BxK.shape[1], eos_ids=eos_ids, features=features)


def commit(drafter, drafter_params, state: DecodeState, draft_BxK, n_accepted_B, next_B, cache, draft_state,
           max_new_B, *, proposed: int, eos_ids: tuple, features=None) -> DecodeState:
  """Per-row commit of the first n_accepted_B tokens of draft_BxK and then next_B: tokens, lengths (the cache
  rollback), stops and the round log (`proposed`: the drafts this round verified)."""
  batch, k = draft_BxK.shape
  rows_B = jnp.arange(batch)

  index_1xK1 = jnp.arange(k + 1, dtype=jnp.int32)[None, :]
  padded_BxK1 = jnp.concatenate([draft_BxK, jnp.zeros((batch, 1), jnp.int32)], axis=1)
  emitted_BxK1 = jnp.where(index_1xK1 < n_accepted_B[:, None], padded_BxK1, next_B[:, None])
  count_B = jnp.minimum(n_accepted_B + 1, max_new_B - state.n_new_B)
  eos_BxK1 = is_eos(emitted_BxK1, eos_ids) & (index_1xK1 < count_B[:, None])
  hit_eos_B = eos_BxK1.any(axis=1)
  count_B = jnp.where(hit_eos_B, jnp.argmax(eos_BxK1, axis=1) + 1, count_B)
  count_B = jnp.where(state.done_B, 0, count_B)

  size = state.tokens_BxS.shape[1]
  write_at = jnp.where(index_1xK1 < count_B[:, None], state.seq_len_B[:, None] + index_1xK1, size)
  tokens_BxS = state.tokens_BxS.at[rows_B[:, None], write_at].set(emitted_BxK1, mode="drop")
  seq_len_B = state.seq_len_B + count_B
  n_new_B = state.n_new_B + count_B
  done_B = state.done_B | budget_spent(n_new_B, max_new_B) | hit_eos_B
  if drafter is not None:
    draft_state = drafter.commit(drafter_params, draft_state, n_accepted_B, seq_len_B, features=features)
  active_B = ~state.done_B
  return state.replace(
      tokens_BxS=tokens_BxS,
      seq_len_B=seq_len_B,
      n_new_B=n_new_B,
      done_B=done_B,
      cache=cache.with_lengths(seq_len_B - 1),
      draft_state=draft_state,
      round=state.round + 1,
      accepted_RxB=state.accepted_RxB.at[state.round].set(jnp.where(active_B, n_accepted_B, -1)),
      emitted_RxB=state.emitted_RxB.at[state.round].set(count_B),
      k_R=state.k_R.at[state.round].set(proposed),
  )


def speculative_round(target, drafter, drafter_params, state: DecodeState, max_new_B, *, k: int, sampling,
                      eos_ids: tuple) -> DecodeState:
  """Draft K, verify K+1 positions, accept and commit: one round (K = 0 is an autoregressive step)."""
  draft_BxK, q_BxKxV, state = draft(drafter, drafter_params, state, k=k, sampling=sampling,
                                    vocab_size=target.config.vocab_size)
  feature_layers = None if drafter is None else drafter.feature_layers
  logits_BxK1xV, cache, features = verify(target, state, draft_BxK, feature_layers)
  return accept_and_commit(drafter, drafter_params, state, logits_BxK1xV, q_BxKxV, draft_BxK, cache,
                           state.draft_state, max_new_B, sampling=sampling, eos_ids=eos_ids, features=features)


def verify_tree(target, inputs_BxN1, slots_BxN1, cache, parent_BxN, q_BxN1xV, keys_B, *, branching: str, sampling,
                feature_layers=None):
  """ONE target call over [root] + a tree's N nodes (consecutive slots from the root's) with the tree's attention,
  exact acceptance down the tree and the accepted path compacted in the cache: (path_BxN, n_accepted_B, next_B,
  cache, the TargetFeatures of the N + 1 positions or None)."""
  root_slot_B = slots_BxN1[:, 0]
  logits_BxN1xV, cache, features = score(target, inputs_BxN1, slots_BxN1, cache, feature_layers,
                                         tree=tree_layout(parent_BxN, root_slot_B))
  if sampling.greedy:
    path_BxN, n_accepted_B, next_B = accept_tree_greedy(greedy_tokens(logits_BxN1xV), inputs_BxN1[:, 1:], parent_BxN)
  else:
    path_BxN, n_accepted_B, next_B = accept_tree(distribution(logits_BxN1xV, sampling), q_BxN1xV, inputs_BxN1[:, 1:],
                                                 parent_BxN, keys_B, branching=branching)
  return path_BxN, n_accepted_B, next_B, compact_path(cache, root_slot_B, path_BxN, n_accepted_B), features


def tree_round(target, drafter, drafter_params, state: DecodeState, max_new_B, *, tree, sampling,
               eos_ids: tuple) -> DecodeState:
  """One round of a token tree (`StaticTree` or `DynamicTree`): the drafter's N nodes, ONE target call over [last
  token] + nodes with the tree's attention, exact acceptance down the tree, the accepted path compacted in both
  caches, then the chain's commit (with the target's features of the root and the path, for drafters that read
  them)."""
  draft_keys, accept_keys = round_keys(state)
  tokens_BxN, parent_BxN, q_BxN1xV, drafted = drafter.propose_tree(
      drafter_params, drafting_state(drafter, state), state.tokens_BxS, state.seq_len_B, tree, sampling, draft_keys,
      target.config.vocab_size)
  state = after_drafting(drafter, state, drafted)
  batch, n = tokens_BxN.shape
  root_slot_B = state.seq_len_B - 1
  last_B = state.tokens_BxS[jnp.arange(batch), root_slot_B]
  slots_BxN1 = root_slot_B[:, None] + jnp.arange(n + 1, dtype=jnp.int32)[None, :]
  path_BxN, n_accepted_B, next_B, cache, features = verify_tree(
      target, jnp.concatenate([last_B[:, None], tokens_BxN], axis=1), slots_BxN1, state.cache, parent_BxN, q_BxN1xV,
      accept_keys, branching=tree.branching, sampling=sampling, feature_layers=drafter.feature_layers)
  path_BxD = path_BxN[:, :tree.max_depth]
  accepted_BxD = jnp.take_along_axis(tokens_BxN, jnp.maximum(path_BxD, 0), axis=1)
  draft_state = drafter.commit_tree(drafter_params, state.draft_state, path_BxN, n_accepted_B, root_slot_B,
                                    accepted_BxD)
  if features is not None:  # [root, path...] in chain order, as a chain's verify call gives them
    index_BxD1 = jnp.concatenate([jnp.zeros((batch, 1), jnp.int32), jnp.maximum(path_BxD + 1, 0)], axis=1)
    features = jax.tree.map(lambda a: jnp.take_along_axis(a, index_BxD1.reshape(index_BxD1.shape + (1,) * (a.ndim - 2)),
                                                          axis=1), features)
  new_state = commit(drafter, drafter_params, state, accepted_BxD, n_accepted_B, next_B, cache, draft_state, max_new_B,
                     proposed=n, eos_ids=eos_ids, features=features)
  if isinstance(state.tree_rank_RxBxD1, tuple):  # no log to keep (a caller's own state)
    return new_state
  rank_BxD1, children_BxD1 = path_ranks(parent_BxN, path_BxN, n_accepted_B, tree.max_depth)
  active_B1 = ~state.done_B[:, None]
  return new_state.replace(
      tree_rank_RxBxD1=state.tree_rank_RxBxD1.at[state.round].set(jnp.where(active_B1, rank_BxD1, -1)),
      tree_children_RxBxD1=state.tree_children_RxBxD1.at[state.round].set(jnp.where(active_B1, children_BxD1, 0)))
