"""The one list of drafting methods. A name maps to its drafter class, how a source string builds it, and for the
methods that learn, their training recipe and whether the benchmark needs a trained directory. The CLI
(`drafter_from_config`), the benchmark (`plan.validate_config`, `runner._drafter`), training (`recipes`) and export
(`export.save_drafter` / `load_drafter`) all read it; adding a drafter is its module plus one `register` line here.

A source is the string a config names beside the method (`config.draft_model` in the scripts,
`config.drafter_dirs.<name>` in the benchmark); "" asks for the method's default. `settings` are the config's other
keys a build may read (`prompt_lookup_max_ngram`, `draft_layers`, `layer_skip_layers`); a missing key is no setting.
Training recipes are named by "module:attribute" and imported on use: `specjax.drafters` never imports
`specjax.training` when it is imported.
"""

import dataclasses
import importlib
import os
from typing import Callable, Mapping

from specjax.drafters.base import Drafter
from specjax.drafters.block_drafter import BlockDrafter
from specjax.drafters.draft_model import DraftModel
from specjax.drafters.feature_head import FeatureHead
from specjax.drafters.layer_skip import LayerSkip, default_exit_layers
from specjax.drafters.medusa import MedusaHeads
from specjax.drafters.prompt_lookup import PromptLookup
from specjax.drafters.quantized import SCHEMES as QUANTIZED_SCHEMES, QuantizedDraft
from specjax.drafters.shipped import SHIPPED, shipped_directory
from specjax.drafters.truncated import truncated_model
from specjax.model import Model

NO_DRAFTER = ("none", "ar")  # plain autoregressive decoding: the CLI's name for it, and the benchmark's
UNTRAINED = "untrained"      # the source of a freshly initialised trainable drafter (its code path, not acceptance)

Build = Callable[[Model, str, Mapping], Drafter]


@dataclasses.dataclass(frozen=True)
class Entry:
  """One method. `build(target, source, settings)` makes the drafter (None: the class's no-argument constructor,
  the source ignored); `recipe` names its training `Recipe` ("" = not trainable); `needs_trained_dir`: the benchmark
  requires `config.drafter_dirs.<name>` (a trained directory, or "untrained")."""

  name: str
  drafter: type
  build: Build | None = None
  recipe: str = ""
  needs_trained_dir: bool = False

  @property
  def trainable(self) -> bool:
    return bool(self.recipe)

  def make(self, target: Model, source: str = "", settings: Mapping | None = None) -> Drafter:
    return self.build(target, source, settings or {}) if self.build else self.drafter()

  def training_recipe(self):
    """The `specjax.training.recipes.Recipe` this entry names (imported now)."""
    if not self.recipe:
      raise ValueError(f"drafter {self.name!r} is not trainable; trainable kinds: {list(trainable())}")
    module, _, attribute = self.recipe.partition(":")
    return getattr(importlib.import_module(module), attribute)


_ENTRIES: dict[str, Entry] = {}


def register(entry: Entry) -> Entry:
  """Adds a method (at import time below, or at run time: a test's throwaway drafter)."""
  if entry.name in _ENTRIES or entry.name in NO_DRAFTER:
    raise ValueError(f"drafter name {entry.name!r} is taken; taken: {list(NO_DRAFTER + names())}")
  if not (isinstance(entry.drafter, type) and issubclass(entry.drafter, Drafter)):
    raise TypeError(f"drafter {entry.name!r}: {entry.drafter!r} is not a specjax.drafters.Drafter subclass")
  _ENTRIES[entry.name] = entry
  return entry


def unregister(name: str) -> None:
  get(name)
  del _ENTRIES[name]


def names() -> tuple[str, ...]:
  """Every registered method, in registration order (without the NO_DRAFTER names)."""
  return tuple(_ENTRIES)


def trainable() -> tuple[str, ...]:
  return tuple(name for name, entry in _ENTRIES.items() if entry.trainable)


def get(name: str) -> Entry:
  if name not in _ENTRIES:
    raise ValueError(f"unknown drafter {name!r}; known: {list(names())}, or {' / '.join(NO_DRAFTER)} for none")
  return _ENTRIES[name]


def build(name: str, target: Model, source: str = "", settings: Mapping | None = None) -> Drafter | None:
  """The drafter `name` names (None for NO_DRAFTER) for `target`, from `source` and `settings`."""
  return None if name in NO_DRAFTER else get(name).make(target, source, settings)


def name_of(drafter: Drafter) -> str:
  """The method whose class `drafter` is (exactly, not a subclass)."""
  for entry in _ENTRIES.values():
    if type(drafter) is entry.drafter:
      return entry.name
  raise TypeError(f"{drafter!r} is no registered drafter's class; known: {list(names())}")


def trained(cls: type) -> Build:
  """The build of a trainable kind: a directory that scripts/train_draft.py wrote (loaded by
  specjax.training.export, and checked to hold a `cls`), "shipped" for the one inside the package that fits the
  target (specjax.drafters.shipped), or "untrained" for `cls.create(target)`."""

  def build(target: Model, source: str, settings: Mapping) -> Drafter:
    name = next(entry.name for entry in _ENTRIES.values() if entry.drafter is cls)
    if source == UNTRAINED:
      return cls.create(target)
    if not source:
      raise ValueError(f"drafter {name!r} needs draft_source: the directory of a trained {name} "
                       f"(scripts/train_draft.py writes one), {SHIPPED!r} or {UNTRAINED!r}")
    if source == SHIPPED:
      source = shipped_directory(name, target.config)
    from specjax.training.export import load_drafter  # training imports drafters, never the reverse at import
    drafter = load_drafter(source, target)
    if type(drafter) is not cls:
      raise ValueError(f"{source} holds a {type(drafter).__name__}, not a {cls.__name__}")
    return drafter

  return build


def _prompt_lookup(target: Model, source: str, settings: Mapping) -> PromptLookup:
  return PromptLookup(max_ngram=settings.get("prompt_lookup_max_ngram", 3))


def _draft_model(target: Model, source: str, settings: Mapping) -> DraftModel:
  """A model source (a checkpoint path or name, random:NAME), truncate:N (the target's first N layers), or ""
  for truncate:<settings draft_layers>."""
  if not source:
    n = settings.get("draft_layers")
    if not n:
      raise ValueError("drafter 'draft_model' needs draft_source: a model source or truncate:N "
                       "(or the setting draft_layers)")
    if n >= target.config.n_layers:
      raise ValueError(f"config.draft_layers={n} must be below the target's {target.config.n_layers} layers")
    source = f"truncate:{n}"
  if source.startswith("truncate:"):
    return DraftModel(truncated_model(target, int(source.split(":", 1)[1])))
  from specjax.cli import model_from_source  # the scripts' model sources; the CLI imports this module
  return DraftModel(model_from_source(source, target.config.dtype))


def _layer_skip(target: Model, source: str, settings: Mapping) -> LayerSkip:
  """N (the target's first N layers and its head), a trained LayerSkip directory, "untrained", or "" for
  N = settings layer_skip_layers (0 or missing: `default_exit_layers`)."""
  if source.isdigit():
    return LayerSkip.create(target, int(source))
  if source:
    return trained(LayerSkip)(target, source, settings)
  n = settings.get("layer_skip_layers") or default_exit_layers(target.config.n_layers)
  if not 1 <= n < target.config.n_layers:
    raise ValueError(f"config.layer_skip_layers={n} must be in [1, {target.config.n_layers})")
  return LayerSkip.create(target, n)


def _quantized(target: Model, source: str, settings: Mapping) -> QuantizedDraft:
  """"q4" (the default) or "int8": the target's own weights quantized; otherwise a GGUF path (or known model name)
  whose Q4_0 / Q4_1 / Q8_0 blocks are kept as they are."""
  source = source or "q4"
  if source in QUANTIZED_SCHEMES:
    return QuantizedDraft.from_model(target, source)
  from specjax.checkpoints.load import KNOWN_MODELS
  if source.lower() in KNOWN_MODELS or os.path.isfile(source):
    return QuantizedDraft.from_gguf(source, target)
  raise ValueError(f"drafter 'quantized' needs draft_source {' or '.join(map(repr, QUANTIZED_SCHEMES))} (the "
                   f"target's weights quantized) or a .gguf file, got {source!r}")


_RECIPES = "specjax.training.recipes"
register(Entry("draft_model", DraftModel, _draft_model, recipe=f"{_RECIPES}:DRAFT_MODEL"))
register(Entry("prompt_lookup", PromptLookup, _prompt_lookup))
register(Entry("layer_skip", LayerSkip, _layer_skip, recipe=f"{_RECIPES}:LAYER_SKIP"))
register(Entry("medusa", MedusaHeads, trained(MedusaHeads), recipe=f"{_RECIPES}:MEDUSA",
               needs_trained_dir=True))
register(Entry("feature_head", FeatureHead, trained(FeatureHead), recipe=f"{_RECIPES}:FEATURE_HEAD",
               needs_trained_dir=True))
register(Entry("quantized", QuantizedDraft, _quantized))
register(Entry("block_drafter", BlockDrafter, trained(BlockDrafter), recipe=f"{_RECIPES}:BLOCK_DRAFTER",
               needs_trained_dir=True))
