"""`TrainedHead`: a drafter whose arrays are a small trained NNX net plus the target's frozen embedding and head
(`vocab_head`). Subclasses name the net's module class and how their static config follows from the target."""

import dataclasses
import functools

from flax import nnx

from specjax.drafters.base import Drafter, with_pure_dict
from specjax.drafters.vocab_head import frozen_head
from specjax.model import Model


@functools.lru_cache(maxsize=16)
def _graphdef(net_class: type, config):
  return nnx.graphdef(nnx.eval_shape(lambda: net_class(config, nnx.Rngs(0))))


class TrainedHead(Drafter):
  """`params()` = {"net": the net's state (what training changes), "frozen": the target's embedding and head}.
  Equal (and hashed) by class and static config only, so a retrained head reuses the compiled program."""

  net_class: type = None      # the NNX module, built as net_class(config, rngs)
  config_class: type = None   # the frozen config dataclass, with for_target(target_config)

  def __init__(self, config, net: nnx.State, frozen: dict):
    self.config = config
    self.net = net
    self.frozen = frozen
    self.vocab_size = config.vocab_size

  @classmethod
  def create(cls, target: Model, config=None, seed: int = 0, vocab_ids=None):
    """A freshly initialised head for `target` (vocab_ids: the draft vocabulary, None for all tokens)."""
    config = config or cls.config_class.for_target(target.config)
    if vocab_ids is not None and len(vocab_ids) != config.draft_vocab_size:
      raise ValueError(f"{len(vocab_ids)} vocab_ids for draft_vocab_size {config.draft_vocab_size}")
    if vocab_ids is None and config.draft_vocab_size != config.vocab_size:
      raise ValueError("a reduced draft_vocab_size needs vocab_ids")
    return cls(config, cls.initial_net(target, config, seed), frozen_head(target, vocab_ids))

  @classmethod
  def initial_net(cls, target: Model, config, seed: int) -> nnx.State:
    """The net's state before training (random unless a subclass starts it from the target)."""
    return nnx.split(cls.net_class(config, nnx.Rngs(seed)))[1]

  def with_net(self, net: nnx.State):
    return type(self)(self.config, net, self.frozen)

  def __hash__(self):
    return hash((type(self), self.config))

  def __eq__(self, other):
    return type(other) is type(self) and other.config == self.config

  def __repr__(self):
    return f"{type(self).__name__}(draft_vocab={self.config.draft_vocab_size}, {self.config})"

  def params(self):
    return {"net": self.net, "frozen": self.frozen}

  def module(self, net: nnx.State):
    return nnx.merge(_graphdef(self.net_class, self.config), net)

  def saved(self):
    """The static config and the net with the draft vocabulary; the embedding and head come from the target."""
    return ({"config": dataclasses.asdict(self.config)},
            {"net": self.net.to_pure_dict(), "vocab_ids": self.frozen["vocab_ids"]})

  @classmethod
  def from_saved(cls, target: Model, description: dict, restore):
    config = cls.config_class(**{k: tuple(v) if isinstance(v, list) else v for k, v in description["config"].items()})
    if (config.d_model, config.vocab_size) != (target.config.d_model, target.config.vocab_size):
      raise ValueError(f"this {cls.__name__} was trained for d_model={config.d_model}, vocab={config.vocab_size}; "
                       f"the target has d_model={target.config.d_model}, vocab={target.config.vocab_size}")
    full = config.draft_vocab_size == config.vocab_size
    fresh = cls.create(target, config, vocab_ids=None if full else list(range(config.draft_vocab_size)))
    saved = restore({"net": fresh.net.to_pure_dict(), "vocab_ids": fresh.frozen["vocab_ids"]})
    head = cls.create(target, config, vocab_ids=None if full else saved["vocab_ids"])
    return head.with_net(with_pure_dict(fresh.net, saved["net"]))
