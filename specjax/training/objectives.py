"""What each trainable drafter fits: its trainable and frozen arrays, the target layers its batches carry, and its
loss (KL to the target's distribution, plus feature regression where used), computed by the drafter's own modules.

Every objective's batch: tokens [B, T], mask [B, T], hidden [B, T, D] (the target's final hidden, so its logits
at position t, the distribution of token t + 1) and layers [B, T, L, D] (the residual streams of `layer_ids`).
"""

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import nnx

from specjax.drafters.block_drafter import BlockDrafter
from specjax.drafters.draft_model import DraftModel
from specjax.drafters.feature_head import FeatureHead
from specjax.drafters.layer_skip import LayerSkip
from specjax.drafters.medusa import MedusaHeads
from specjax.drafters.vocab_head import embed_tokens, head_logits
from specjax.models import get_family
from specjax.training.losses import (argmax_cross_entropy, cross_entropy, feature_regression, kl_divergence,
                                     masked_mean, shift_left, top1_agreement)


@dataclasses.dataclass(frozen=True)
class Objective:
  """`loss(trainable, frozen, batch) -> (loss, metrics)` is pure (jit it); `drafter(trainable)` builds the drafter."""

  kind: str
  layer_ids: tuple
  trainable: Any
  frozen: Any
  loss: Callable
  drafter: Callable


def _distill(metrics: dict, name: str, target_logits, draft_logits, valid_BxT):
  """Adds kl_{name} and top1_{name} to metrics; returns the KL."""
  kl = masked_mean(kl_divergence(target_logits, draft_logits), valid_BxT)
  metrics[f"kl_{name}"] = kl
  metrics[f"top1_{name}"] = masked_mean(top1_agreement(target_logits, draft_logits), valid_BxT)
  return kl


def _weighted(terms: list, decay: float):
  weights = [decay**i for i in range(len(terms))]
  return sum(w * t for w, t in zip(weights, terms)) / sum(weights)


def feature_head_objective(head: FeatureHead, ttt_steps: int = 3, step_decay: float = 0.8,
                           feature_weight: float = 0.0, top1_weight: float = 0.0) -> Objective:
  """Training-time test over `ttt_steps` draft steps; step s at chain p is scored against the target's
  distribution at position p + s - 1 (with feature_weight, also its normed output against the target's hidden;
  with top1_weight, also the cross-entropy with the target's argmax there, what greedy verification accepts)."""

  def loss(net_state, frozen, batch):
    net = head.module(net_state)
    fused = net.fused(batch["layers"])
    shifted = jnp.pad(fused[:, :-1], ((0, 0), (1, 0), (0, 0)))
    embeds = [embed_tokens(frozen, shift_left(batch["tokens"], s)) for s in range(ttt_steps)]
    target_logits = head_logits(frozen, batch["hidden"])
    metrics, terms = {}, []
    for s, out in enumerate(net.unrolled(shifted, embeds)):
      valid = shift_left(batch["mask"], s, False)
      target_hidden, predicted = shift_left(batch["hidden"], s), net.out_norm(out)
      step_target, step_draft = shift_left(target_logits, s), head_logits(frozen, predicted)
      term = _distill(metrics, str(s + 1), step_target, step_draft, valid)
      if top1_weight:
        term = term + top1_weight * masked_mean(argmax_cross_entropy(step_target, step_draft), valid)
      if feature_weight:
        term = term + feature_weight * masked_mean(feature_regression(predicted, target_hidden), valid)
      terms.append(term)
    metrics["kl"] = metrics["kl_1"]
    return _weighted(terms, step_decay), metrics

  return Objective("feature_head", head.config.feature_layers, head.net, head.frozen, loss, head.with_net)


def random_anchors(tokens_BxT: jax.Array, mask_BxT: jax.Array, n: int, seed: int = 0):
  """(anchors_BxN, valid_BxN): n distinct positions a per row with mask[a] (the target's distribution at a, of
  token a + 1, is scored) and a token after them, drawn with a key from the batch's tokens (a pure loss, and the
  same anchors for the same rows); rows with fewer such positions repeat invalid ones."""
  batch, t_len = tokens_BxT.shape
  position_T = jnp.arange(t_len, dtype=jnp.uint32)
  key = jax.random.fold_in(jax.random.key(seed), jnp.sum(tokens_BxT.astype(jnp.uint32) * (position_T + 1)[None, :]))
  allowed = mask_BxT & (position_T < t_len - 1)[None, :]
  scores, anchors_BxN = jax.lax.top_k(jnp.where(allowed, jax.random.uniform(key, (batch, t_len)), -1.0),
                                      min(n, t_len - 1))
  return anchors_BxN.astype(jnp.int32), scores >= 0


def block_drafter_objective(drafter: BlockDrafter, anchors: int = 16, gamma: float = 4.0, ce_weight: float = 1.0,
                            kl_weight: float = 0.0, seed: int = 0) -> Objective:
  """DFlash's training: `anchors` random blocks per sequence in one forward (`BlockNet.anchored`); mask position j
  predicts the token at a + j: cross-entropy with the true token (and, with kl_weight, the KL to the target's
  distribution there), weighted by exp(-(j - 1) / gamma) along the block. A label outside the draft vocabulary
  drops out of the cross-entropy only."""
  size = drafter.config.block_size
  weight_J = jnp.exp(-jnp.arange(size - 1, dtype=jnp.float32) / gamma)

  def loss(net_state, frozen, batch):
    tokens, mask = batch["tokens"], batch["mask"]
    anchors_BxN, anchor_ok_BxN = random_anchors(tokens, mask, anchors, seed)
    out_BxNxJxD = drafter.module(net_state).anchored(frozen, batch["layers"], tokens, anchors_BxN, size)[:, :, 1:]
    t_len = tokens.shape[1]
    label_BxNxJ = anchors_BxN[:, :, None] + jnp.arange(1, size)[None, None, :]
    at_BxNxJ = jnp.minimum(label_BxNxJ, t_len - 1)
    rows_B11 = jnp.arange(tokens.shape[0])[:, None, None]
    valid = anchor_ok_BxN[:, :, None] & (label_BxNxJ < t_len) & mask[rows_B11, at_BxNxJ - 1]
    draft_logits = head_logits(frozen, out_BxNxJxD)
    target_logits = head_logits(frozen, batch["hidden"][rows_B11, at_BxNxJ - 1])
    index_V = jnp.full((frozen["embed"].shape[0],), -1, jnp.int32).at[frozen["vocab_ids"]].set(
        jnp.arange(frozen["vocab_ids"].shape[0], dtype=jnp.int32))
    label_index = index_V[tokens[rows_B11, at_BxNxJ]]
    in_vocab = valid & (label_index >= 0)
    ce = cross_entropy(draft_logits, jnp.maximum(label_index, 0))
    kl = kl_divergence(target_logits, draft_logits)
    weighted = weight_J[None, None, :] * valid
    term = ce_weight * jnp.where(in_vocab, ce, 0.0) + kl_weight * kl
    top1 = top1_agreement(target_logits, draft_logits)
    metrics = {"kl": masked_mean(kl, valid), "ce": masked_mean(ce, in_vocab), "top1": masked_mean(top1, valid),
               "accuracy": masked_mean(jnp.argmax(draft_logits, -1) == label_index, in_vocab)}
    for j in range(size - 1):
      metrics[f"kl_{j + 1}"] = masked_mean(kl[:, :, j], valid[:, :, j])
      metrics[f"top1_{j + 1}"] = masked_mean(top1[:, :, j], valid[:, :, j])
    return jnp.sum(term * weighted) / jnp.maximum(jnp.sum(weighted), 1e-9), metrics

  return Objective("block_drafter", drafter.config.feature_layers, drafter.net, drafter.frozen, loss,
                   drafter.with_net)


def medusa_objective(heads: MedusaHeads, step_decay: float = 0.8) -> Objective:
  """Head i on the hidden state at t is scored against the target's distribution at t + i + 1."""

  def loss(net_state, frozen, batch):
    inputs_BxTxHxD = heads.module(net_state)(batch["hidden"])
    target_logits = head_logits(frozen, batch["hidden"])
    metrics, terms = {}, []
    for i in range(heads.config.n_heads):
      target = shift_left(target_logits, i + 1)
      terms.append(_distill(metrics, str(i + 1), target, head_logits(frozen, inputs_BxTxHxD[:, :, i]),
                            shift_left(batch["mask"], i + 1, False)))
    metrics["kl"] = metrics["kl_1"]
    return _weighted(terms, step_decay), metrics

  return Objective("medusa", (), heads.net, heads.frozen, loss, heads.with_net)


def _split_adapter(params: nnx.State):
  rest = nnx.State({k: v for k, v in params.items() if k != "exit_adapter"})
  return params["exit_adapter"], rest


def layer_skip_objective(skip: LayerSkip, loss_vocab_ids) -> Objective:
  """Only the exit adapter trains; its input, the residual stream after layer N - 1, comes with the batch. The KL
  is taken over `loss_vocab_ids` (both distributions renormalised there: the full head's matmul dominates)."""
  if not skip.adapter_rank:
    raise ValueError("a LayerSkip without an exit adapter (adapter_rank 0) has nothing to train")
  adapter, rest = _split_adapter(skip.model.params)
  ids = jnp.asarray(loss_vocab_ids)

  def loss(adapter_state, frozen, batch):
    params = nnx.merge_state(frozen["model"], nnx.State({"exit_adapter": adapter_state}))
    module = skip.model.with_params(params).module()
    head = {"head": output_rows(module, frozen["loss_vocab_ids"])}
    draft = head_logits(head, module.exit_adapter(module.final_norm(batch["layers"][:, :, 0])))
    metrics = {}
    metrics["kl"] = _distill(metrics, "1", head_logits(head, batch["hidden"]), draft, batch["mask"])
    return metrics["kl"], metrics

  return Objective("layer_skip", (skip.n_layers - 1,), adapter, {"model": rest, "loss_vocab_ids": ids}, loss,
                   skip.with_adapter)


def output_rows(module, ids_Vl: jax.Array) -> jax.Array:
  """Rows `ids` of a decoder's output head, [V_loss, D] (what `module.logits` multiplies by, restricted)."""
  if module.config.tie_embeddings:
    return jnp.take(module.embed[...], ids_Vl, axis=0)
  return jnp.take(module.head.kernel[...], ids_Vl, axis=1).T


def dense_hidden(module, tokens_BxT: jax.Array) -> jax.Array:
  """A decoder's final-normed hidden states over whole sequences without a cache, through its family's
  `chain_block` (differentiable; the decode path's cache attention has a data-dependent loop)."""
  batch, t_len = tokens_BxT.shape
  family = get_family(module.config.family)
  positions = jnp.broadcast_to(jnp.arange(t_len, dtype=jnp.int32), (batch, t_len))
  cos, sin = family.rope_tables(module.config, positions)
  x = jnp.take(module.embed[...], tokens_BxT, axis=0)
  for block in module.layers:
    x = family.chain_block(block, x, cos, sin, [], [])
  return module.final_norm(x)


def draft_model_objective(draft: DraftModel, target_head_VxD: jax.Array, loss_vocab_ids,
                          train_embeddings: bool = False) -> Objective:
  """Distillation of a whole small model (its embedding too when train_embeddings); KL over `loss_vocab_ids`."""
  params = draft.model.params
  frozen_keys = () if train_embeddings else ("embed",)
  trainable = nnx.State({k: v for k, v in params.items() if k not in frozen_keys})
  fixed = nnx.State({k: v for k, v in params.items() if k in frozen_keys})
  ids = jnp.asarray(loss_vocab_ids)

  def loss(trainable_state, frozen, batch):
    module = draft.model.with_params(nnx.merge_state(frozen["model"], trainable_state)).module()
    hidden = dense_hidden(module, batch["tokens"])
    draft_logits = head_logits({"head": output_rows(module, frozen["loss_vocab_ids"])}, hidden)
    target_logits = head_logits({"head": frozen["target_head"]}, batch["hidden"])
    metrics = {}
    metrics["kl"] = _distill(metrics, "1", target_logits, draft_logits, batch["mask"])
    return metrics["kl"], metrics

  def rebuild(trainable_state):
    return DraftModel(draft.model.with_params(nnx.merge_state(fixed, trainable_state)))

  frozen = {"model": fixed, "target_head": jnp.take(target_head_VxD, ids, axis=0), "loss_vocab_ids": ids}
  return Objective("draft_model", (), trainable, frozen, loss, rebuild)
