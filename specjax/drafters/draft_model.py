"""A smaller decoder proposes K tokens autoregressively from its own KV cache."""

import jax
import jax.numpy as jnp

from specjax.cache import init_cache
from specjax.drafters.base import Drafter
from specjax.model import Model
from specjax.sampling import draw_tokens
from specjax.trees.grow import entries_in_node_order, grow
from specjax.trees.layout import compact_path


class DraftModel(Drafter):
  """Draft with any Llama-family model that shares the target's vocabulary (depth, width, heads may differ).

  Each round re-feeds the last two tokens of the sequence, which makes the cache right whatever the
  target accepted last round: rollback is only a matter of positions.

  shares_target_cache (a draft of the target's cache layout, `specjax.cache.cache_layout`): the draft keeps no
  cache but drafts in the target's (`Drafter.shares_target_cache`): it re-feeds only the last token, the one the
  target has not yet verified, since the target's cache holds every committed token's keys and values.
  """

  branches = True

  def __init__(self, model: Model, shares_target_cache: bool = False):
    if not isinstance(model, Model):
      raise TypeError(f"DraftModel expects a specjax Model, got {type(model).__name__}")
    self.model = model
    self.vocab_size = model.config.vocab_size
    self.max_seq_len = model.config.max_seq_len
    self.shares_target_cache = bool(shares_target_cache)
    self.catches_up = not self.shares_target_cache   # a shared cache is never behind

  def __hash__(self):
    return hash((DraftModel, self.model.graphdef, self.model.config, self.shares_target_cache))

  def __eq__(self, other):
    return (isinstance(other, DraftModel) and other.model.config == self.model.config
            and other.model.graphdef == self.model.graphdef
            and other.shares_target_cache == self.shares_target_cache)

  def params(self):
    return self.model.params

  def init(self, params, tokens_BxS, prompt_len_B, prompt_bucket, features=None):
    module = self.model.with_params(params).module()
    batch, size = tokens_BxS.shape
    cache = init_cache(self.model.config, batch, size)
    positions = jnp.broadcast_to(jnp.arange(prompt_bucket, dtype=jnp.int32), (batch, prompt_bucket))
    _, cache, _ = module.hidden_states(tokens_BxS[:, :prompt_bucket], positions, cache)
    return cache

  def observe(self, params, state, tokens_BxS, seq_len_B):
    """Writes the token at seq_len_B - 2 into the draft cache, so that after autoregressive rounds the two tokens
    `propose` re-feeds are again the only ones the cache lacks (a shared cache already holds it)."""
    if self.shares_target_cache:
      return state
    return DraftModel.catch_up(self, params, state, tokens_BxS, (seq_len_B - 2)[:, None])

  def catch_up(self, params, state, tokens_BxS, positions_BxC):
    """The missed tokens through the draft in one call (a chunk of a prefill)."""
    module = self.model.with_params(params).module()
    rows_B1 = jnp.arange(tokens_BxS.shape[0])[:, None]
    _, cache, _ = module.hidden_states(tokens_BxS[rows_B1, positions_BxC], positions_BxC, state)
    return cache

  def _refeed(self, module, state, tokens_BxS, seq_len_B):
    """The last two tokens through the draft (the last one alone in a shared cache, which must keep the target's
    entry at seq_len_B - 2): (logits after the last one [B, V], cache)."""
    n = 1 if self.shares_target_cache else 2
    rows_B1 = jnp.arange(tokens_BxS.shape[0])[:, None]
    positions_BxN = seq_len_B[:, None] - n + jnp.arange(n)[None, :]
    logits, _, cache = module(tokens_BxS[rows_B1, positions_BxN], positions_BxN, state)
    return logits[:, -1], cache

  def propose(self, params, state, tokens_BxS, seq_len_B, k, sampling, keys_B):
    module = self.model.with_params(params).module()
    last_logits, cache = self._refeed(module, state, tokens_BxS, seq_len_B)
    keys_KxB = jnp.moveaxis(jax.vmap(lambda key: jax.random.split(key, k))(keys_B), 1, 0)

    def draw(logits_BxV, keys):
      return draw_tokens(keys, logits_BxV, sampling)

    def step(carry, inputs):
      cache, logits_BxV = carry
      keys, offset = inputs
      token_B, q_BxV = draw(logits_BxV, keys)
      logits, _, cache = module(token_B[:, None], (seq_len_B + offset)[:, None], cache)
      return (cache, logits[:, 0]), (token_B, q_BxV)

    (cache, last_logits), (tokens_KxB, q_KxBxV) = jax.lax.scan(
        step, (cache, last_logits), (keys_KxB[:-1], jnp.arange(k - 1, dtype=jnp.int32)))
    final_token_B, final_q_BxV = draw(last_logits, keys_KxB[-1])
    draft_BxK = jnp.concatenate([tokens_KxB.T, final_token_B[:, None]], axis=1)
    q_BxKxV = jnp.concatenate([jnp.moveaxis(q_KxBxV, 0, 1), final_q_BxV[:, None]], axis=1)
    return draft_BxK, q_BxKxV, cache

  def propose_tree(self, params, state, tokens_BxS, seq_len_B, tree, sampling, keys_B, vocab_size):
    """One draft call per level over the level's nodes that have children, with the tree's attention
    (`specjax.trees.grow`); the tree's entries stay in the draft cache, in node order, for `commit_tree`."""
    module = self.model.with_params(params).module()
    root_logits_BxV, cache = self._refeed(module, state, tokens_BxS, seq_len_B)

    def expand(cache, tokens_BxL, payload, slots_BxL, layout, depth):
      hidden, cache, _ = module.hidden_states(tokens_BxL, slots_BxL, cache, tree=layout)
      return module.logits(hidden), (), cache

    root_slot_B = seq_len_B - 1
    draft, cache = grow(tree, expand, cache, root_logits_BxV, (), root_slot_B, sampling, keys_B)
    if not self.shares_target_cache:   # a shared cache's tree entries are the target's next
      cache = entries_in_node_order(cache, root_slot_B, draft, tree)
    return draft.tokens_BxN, draft.parent_BxN, draft.q_BxN1xV, cache

  def commit_tree(self, params, state, path_BxN, n_accepted_B, root_slot_B, accepted_BxD):
    if self.shares_target_cache:   # the target's verification compacts the path in the shared cache
      return state
    return compact_path(state, root_slot_B, path_BxN, n_accepted_B)
