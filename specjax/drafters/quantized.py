"""The target's own weights quantized as its draft (quantized self-speculation): int8 per output row, or 4-bit
blocks of 32 with a scale and a minimum (GGUF Q4_1); from a GGUF file, its own Q4_0 / Q4_1 / Q8_0 blocks.

The same decoder runs on those weights (`specjax/quantize.py`), so its drafts agree with the target's most of the
time while each draft step reads 4-8x fewer weight bytes. The rejection sampler keeps the output exact."""

import os

from specjax.cache import cache_layout
from specjax.drafters.draft_model import DraftModel
from specjax.model import Model
from specjax.quantize import is_quantized, quantize_model

SCHEMES = {"int8": "int8", "q4": "q4_1"}  # from_model's schemes -> the stored one


class QuantizedDraft(DraftModel):
  """A DraftModel over a quantized Model (same vocabulary as the target; the engine checks it).

  A draft of the target's own cache layout drafts in the target's KV cache (`Drafter.shares_target_cache`): the
  prompt's and every committed token's keys and values are the target's, so no prefill runs through the quantized
  weights (on CPU that prefill takes XLA's dequantize-then-dot path, about 0.4 s for SmolLM2's 64-token bucket, more
  than the rounds it saves on a short reply), nothing is copied or caught up, and the KV memory is the target's
  alone. Otherwise it keeps and prefills its own cache.
  """

  def __init__(self, model: Model, shares_target_cache: bool = False):
    super().__init__(model, shares_target_cache)
    if not is_quantized(model):
      raise ValueError("QuantizedDraft needs a model with quantized weights; build it with "
                       "QuantizedDraft.from_model(target, scheme) or QuantizedDraft.from_gguf(path)")

  @classmethod
  def from_model(cls, target: Model, scheme: str = "q4", *, shares_target_cache: bool = True) -> "QuantizedDraft":
    """The target's weights (every linear and the embedding, so a tied head too) quantized to `scheme`: "int8"
    (one scale per output row) or "q4" (q4_1 blocks of 32; the embedding and head in q8_0 blocks, as llama.cpp's
    Q4 files keep them). It drafts in the target's cache unless shares_target_cache=False (a model other than the
    target's, of another cache layout)."""
    if not isinstance(scheme, str) or scheme not in SCHEMES:
      raise ValueError(f"unknown QuantizedDraft scheme {scheme!r}; use one of {list(SCHEMES)}")
    if not isinstance(target, Model):
      raise TypeError(f"QuantizedDraft.from_model expects a specjax Model, got {type(target).__name__}")
    return cls(quantize_model(target, SCHEMES[scheme]), shares_target_cache=shares_target_cache)

  @classmethod
  def from_gguf(cls, path: str | os.PathLike, target: Model | None = None) -> "QuantizedDraft":
    """A GGUF file's own Q4_0 / Q4_1 / Q8_0 tensors as they are (`load_model(path, weights="q4")`); with `target`,
    its vocabulary must be the target's, and it drafts in the target's cache where their cache layouts agree."""
    from specjax.checkpoints.load import load_model  # checkpoints import the CLI's dependencies; load on use
    model = load_model(path, weights="q4")
    if target is not None and model.config.vocab_size != target.config.vocab_size:
      raise ValueError(f"the quantized draft {os.fspath(path)} has vocabulary size {model.config.vocab_size}, the "
                       f"target {target.config.vocab_size}; draft and target must share one vocabulary")
    shares = target is not None and cache_layout(model.config) == cache_layout(target.config)
    return cls(model, shares_target_cache=shares)
