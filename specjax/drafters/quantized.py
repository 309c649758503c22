"""The target's own weights quantized as its draft (quantized self-speculation): int8 per output row, or 4-bit
blocks of 32 with a scale and a minimum (GGUF Q4_1); from a GGUF file, its own Q4_0 / Q4_1 / Q8_0 blocks.

The same decoder runs on those weights (`specjax/quantize.py`), so its drafts agree with the target's most of the
time while each draft step reads 4-8x fewer weight bytes. The rejection sampler keeps the output exact."""

import os

import jax
import jax.numpy as jnp

from specjax.cache import init_cache
from specjax.drafters.draft_model import DraftModel
from specjax.model import Model
from specjax.quantize import is_quantized, quantize_model

SCHEMES = {"int8": "int8", "q4": "q4_1"}  # from_model's schemes -> the stored one


class QuantizedDraft(DraftModel):
  """A DraftModel over a quantized Model (same vocabulary as the target; the engine checks it).

  Its cache starts as a copy of the target's after the prompt when the two caches have one shape (the target's
  own architecture): the prompt's keys and values are then the target's, and no prefill runs through the
  quantized weights (on CPU that prefill takes XLA's dequantize-then-dot path, about 0.4 s for SmolLM2's 64-token
  bucket, more than the rounds it saves on a short reply). Otherwise it prefills its own.
  """

  reads_target_cache = True

  def __init__(self, model: Model):
    super().__init__(model)
    if not is_quantized(model):
      raise ValueError("QuantizedDraft needs a model with quantized weights; build it with "
                       "QuantizedDraft.from_model(target, scheme) or QuantizedDraft.from_gguf(path)")

  @classmethod
  def from_model(cls, target: Model, scheme: str = "q4") -> "QuantizedDraft":
    """The target's weights (every linear and the embedding, so a tied head too) quantized to `scheme`: "int8"
    (one scale per output row) or "q4" (q4_1 blocks of 32; the embedding and head in q8_0 blocks, as llama.cpp's
    Q4 files keep them)."""
    if not isinstance(scheme, str) or scheme not in SCHEMES:
      raise ValueError(f"unknown QuantizedDraft scheme {scheme!r}; use one of {list(SCHEMES)}")
    if not isinstance(target, Model):
      raise TypeError(f"QuantizedDraft.from_model expects a specjax Model, got {type(target).__name__}")
    return cls(quantize_model(target, SCHEMES[scheme]))

  @classmethod
  def from_gguf(cls, path: str | os.PathLike, target: Model | None = None) -> "QuantizedDraft":
    """A GGUF file's own Q4_0 / Q4_1 / Q8_0 tensors as they are (`load_model(path, weights="q4")`); with `target`,
    its vocabulary must be the target's."""
    from specjax.checkpoints.load import load_model  # checkpoints import the CLI's dependencies; load on use
    model = load_model(path, weights="q4")
    if target is not None and model.config.vocab_size != target.config.vocab_size:
      raise ValueError(f"the quantized draft {os.fspath(path)} has vocabulary size {model.config.vocab_size}, the "
                       f"target {target.config.vocab_size}; draft and target must share one vocabulary")
    return cls(model)

  def init(self, params, tokens_BxS, prompt_len_B, prompt_bucket, features=None, target_cache=None):
    own = jax.eval_shape(lambda: init_cache(self.model.config, *tokens_BxS.shape))
    if target_cache is not None and _same_shapes(own, target_cache):
      return target_cache
    return super().init(params, tokens_BxS, prompt_len_B, prompt_bucket, features)

  def catch_up(self, params, state, tokens_BxS, positions_BxC, target_cache):
    """A cache of the target's shape takes the target's keys and values at the missed positions (as `init` takes
    the prompt's): a copy, not a pass through the quantized weights."""
    if not _same_shapes(state, target_cache):
      return super().catch_up(params, state, tokens_BxS, positions_BxC, target_cache)
    rows_B1 = jnp.arange(positions_BxC.shape[0])[:, None]
    return state.replace(k=state.k.at[:, rows_B1, positions_BxC].set(target_cache.k[:, rows_B1, positions_BxC]),
                         v=state.v.at[:, rows_B1, positions_BxC].set(target_cache.v[:, rows_B1, positions_BxC]))


def _same_shapes(a, b) -> bool:
  leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
  return len(leaves_a) == len(leaves_b) and all((x.shape, x.dtype) == (y.shape, y.dtype)
                                                for x, y in zip(leaves_a, leaves_b))
