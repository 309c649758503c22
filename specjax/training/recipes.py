"""Config section -> initial drafter and objective for each trainable kind (the draft vocabulary picked from the
corpus), and the target layers each kind's batches carry: one `Recipe` per kind, named by its registry entry
(`specjax.drafters.registry`), which is also the list of trainable kinds."""

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from specjax.drafters import registry
from specjax.drafters.block_drafter import BlockDrafter, BlockDrafterConfig
from specjax.drafters.draft_model import DraftModel
from specjax.drafters.feature_head import FeatureHead, FeatureHeadConfig
from specjax.drafters.layer_skip import LayerSkip, default_exit_layers
from specjax.drafters.medusa import MedusaConfig, MedusaHeads
from specjax.drafters.shipped import SHIPPED, shipped_directory
from specjax.drafters.truncated import truncated_model
from specjax.drafters.vocab_head import most_frequent_tokens, output_matrix
from specjax.model import Model
from specjax.training import objectives
from specjax.training.corpus import text_token_counts
from specjax.training.data import Corpus
from specjax.training.export import load_drafter


@dataclasses.dataclass(frozen=True)
class Recipe:
  """`objective(target, settings, corpus, seed, start=None)`: the initial drafter (`start` when given) and its
  objective (settings: the kind's config section); `layers(target, settings)`: the target layers whose residual
  streams its batches carry (known before the corpus exists)."""

  objective: Callable[..., objectives.Objective]
  layers: Callable[[Model, object], tuple] = lambda target, settings: ()


def _draft_vocab(corpus: Corpus, target: Model, size: int):
  """The `size` tokens most frequent in the training rows (EOS always in), or None for the whole vocabulary."""
  if not size or size >= target.config.vocab_size:
    return None
  return _frequent(corpus, target, size)


def _loss_vocab(corpus: Corpus, target: Model, size: int) -> np.ndarray:
  """Token ids a full-vocabulary drafter's KL is taken over (all of them when size is 0)."""
  if not size or size >= target.config.vocab_size:
    return np.arange(target.config.vocab_size, dtype=np.int32)
  return _frequent(corpus, target, size)


def _frequent(corpus: Corpus, target: Model, size: int) -> np.ndarray:
  """Most frequent in the training rows; a small corpus leaves ties, broken by a broader text's frequencies."""
  rows = corpus.train_rows
  counts = np.bincount(corpus.tokens[rows][corpus.mask[rows]], minlength=target.config.vocab_size)
  return most_frequent_tokens(counts, size, always=target.config.eos_token_ids,
                              tie_break_V=text_token_counts(target))


def _feature_head_config(target: Model, settings, draft_vocab_size: int = 0) -> FeatureHeadConfig:
  return FeatureHeadConfig.for_target(target.config, tuple(settings.feature_layers), settings.ffn_dim, draft_vocab_size,
                                      settings.get("n_layers", FeatureHeadConfig.n_layers))


def _feature_head(target: Model, settings, corpus: Corpus, seed: int, start=None) -> objectives.Objective:
  if start is None:
    vocab = _draft_vocab(corpus, target, settings.draft_vocab_size)
    config = _feature_head_config(target, settings, settings.draft_vocab_size if vocab is not None else 0)
    start = FeatureHead.create(target, config, seed, vocab)
  return objectives.feature_head_objective(start, settings.ttt_steps, settings.step_decay, settings.feature_weight,
                                           settings.top1_weight)


def _medusa(target: Model, settings, corpus: Corpus, seed: int, start=None) -> objectives.Objective:
  if start is None:
    vocab = _draft_vocab(corpus, target, settings.draft_vocab_size)
    config = MedusaConfig.for_target(target.config, settings.n_heads,
                                     settings.draft_vocab_size if vocab is not None else 0)
    start = MedusaHeads.create(target, config, seed, vocab)
  return objectives.medusa_objective(start, settings.step_decay)


def _layer_skip(target: Model, settings, corpus: Corpus, seed: int, start=None) -> objectives.Objective:
  skip = start if start is not None else LayerSkip.create(target, settings.n_layers, settings.adapter_rank, seed=seed)
  return objectives.layer_skip_objective(skip, _loss_vocab(corpus, target, settings.loss_vocab_size))


def _draft_model(target: Model, settings, corpus: Corpus, seed: int, start=None) -> objectives.Objective:
  if not settings.init.startswith("truncate:"):
    raise ValueError(f"draft_model.init must be truncate:N (the target's first N layers), got {settings.init!r}")
  draft = start if start is not None else DraftModel(truncated_model(target, int(settings.init.split(":", 1)[1])))
  return objectives.draft_model_objective(draft, output_matrix(target),
                                          _loss_vocab(corpus, target, settings.loss_vocab_size),
                                          settings.train_embeddings)


def _block_drafter_config(target: Model, settings, draft_vocab_size: int = 0) -> BlockDrafterConfig:
  return BlockDrafterConfig.for_target(target.config, tuple(settings.feature_layers), settings.ffn_dim,
                                       draft_vocab_size, settings.n_layers, settings.block_size,
                                       settings.previous_feature)


def _block_drafter(target: Model, settings, corpus: Corpus, seed: int, start=None) -> objectives.Objective:
  if start is None:
    vocab = _draft_vocab(corpus, target, settings.draft_vocab_size)
    config = _block_drafter_config(target, settings, settings.draft_vocab_size if vocab is not None else 0)
    start = BlockDrafter.create(target, config, seed, vocab)
    if settings.start_from_target:
      start = start.started_from_target(target)
  return objectives.block_drafter_objective(start, settings.anchors, settings.gamma, settings.ce_weight,
                                            settings.kl_weight, seed)


FEATURE_HEAD = Recipe(_feature_head, lambda target, settings: _feature_head_config(target, settings).feature_layers)
MEDUSA = Recipe(_medusa)
LAYER_SKIP = Recipe(_layer_skip,
                    lambda target, settings: ((settings.n_layers or default_exit_layers(target.config.n_layers)) - 1,))
DRAFT_MODEL = Recipe(_draft_model)
BLOCK_DRAFTER = Recipe(_block_drafter,
                       lambda target, settings: _block_drafter_config(target, settings).feature_layers)


def layers_needed(kind: str, target: Model, settings) -> tuple:
  """Target layers whose residual streams a kind's batches carry (known before the corpus exists)."""
  return registry.get(kind).training_recipe().layers(target, settings)


def make_objective(kind: str, target: Model, settings, corpus: Corpus, seed: int = 0) -> objectives.Objective:
  """The initial drafter of `kind` (settings: that kind's config section) and its objective: a fresh one, or with
  `settings.init_from` (a saved drafter's directory, or "shipped") that drafter, in float32, to train on."""
  recipe = registry.get(kind).training_recipe()
  fresh = recipe.objective(target, settings, corpus, seed)
  init_from = settings.get("init_from", "")
  if not init_from:
    return fresh
  directory = shipped_directory(kind, target.config) if init_from == SHIPPED else init_from
  start = load_drafter(directory, target)
  if registry.name_of(start) != kind:
    raise ValueError(f"init_from {init_from!r} holds a {registry.name_of(start)} drafter, not a {kind}")
  warm = recipe.objective(target, settings, corpus, seed, start)
  shapes = [jax.tree.map(lambda x: (x.shape, x.dtype.kind), o.trainable) for o in (fresh, warm)]
  if (fresh.layer_ids, jax.tree.structure(shapes[0])) != (warm.layer_ids, jax.tree.structure(shapes[1])) or \
      jax.tree.leaves(shapes[0]) != jax.tree.leaves(shapes[1]):
    raise ValueError(f"init_from {init_from!r} holds a {kind} of another shape or target layers than the "
                     f"{kind} settings build ({warm.layer_ids} against {fresh.layer_ids}): make the settings match it")
  _check_same_static_config(kind, init_from, fresh.drafter(fresh.trainable), start)
  as_float32 = lambda x: x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x
  return dataclasses.replace(warm, trainable=jax.tree.map(as_float32, warm.trainable))


def _check_same_static_config(kind: str, init_from: str, fresh, saved) -> None:
  """Settings that leave the parameters' shapes alone (a block drafter's block_size, previous_feature) must match
  the saved drafter's too: training on would otherwise use the saved values, silently."""
  fresh_config, saved_config = getattr(fresh, "config", None), getattr(saved, "config", None)
  if not (dataclasses.is_dataclass(fresh_config) and type(fresh_config) is type(saved_config)):
    return
  differ = [f"{field.name} {getattr(saved_config, field.name)!r} (settings: {getattr(fresh_config, field.name)!r})"
            for field in dataclasses.fields(fresh_config)
            if getattr(fresh_config, field.name) != getattr(saved_config, field.name)]
  if differ:
    raise ValueError(f"init_from {init_from!r} holds a {kind} with {', '.join(differ)}: make the settings match it")
