"""The target's frozen embedding and output head as a trained head reuses them, optionally restricted to a draft
vocabulary: drafts are then proposed among those tokens only and q gives every other token zero mass, which the
rejection sampler's residual covers (still exact), while the head's matmul shrinks by V / V_draft."""

import jax
import jax.numpy as jnp
import numpy as np

from specjax.kernels.linear import dense
from specjax.model import Model
from specjax.sampling import draw_tokens


def output_matrix(target: Model) -> jax.Array:
  """The target's output head as [V, D] (the embedding itself when tied)."""
  flat = target.flat_params()
  return flat["embed"] if target.config.tie_embeddings else flat["head.kernel"].T


def frozen_head(target: Model, vocab_ids=None) -> dict:
  """{"embed": [V, D], "head": [V_draft, D], "vocab_ids": [V_draft]}; vocab_ids None keeps the whole vocabulary."""
  embed, head = target.flat_params()["embed"], output_matrix(target)
  if vocab_ids is None:
    return {"embed": embed, "head": head, "vocab_ids": jnp.arange(target.config.vocab_size, dtype=jnp.int32)}
  ids = np.asarray(vocab_ids, np.int32)
  if ids.ndim != 1 or len(np.unique(ids)) != len(ids) or ids.min() < 0 or ids.max() >= target.config.vocab_size:
    raise ValueError(f"vocab_ids must be distinct token ids in [0, {target.config.vocab_size})")
  return {"embed": embed, "head": head[jnp.asarray(ids)], "vocab_ids": jnp.asarray(ids)}


def head_logits(frozen: dict, hidden_xD: jax.Array) -> jax.Array:
  """Float32 logits over the draft vocabulary, [..., V_draft], through `kernels.linear.dense`: a draft step's 1-32
  rows take the CPU skinny kernel (XLA:CPU's dot took 0.9 ms for 2 rows of the 8,192 x 576 head against 0.2;
  docs/results.md section 56), a training step's many rows XLA's dot (under `bf16_gemm`, on bfloat16 operands)."""
  return dense(hidden_xD.astype(jnp.float32), frozen["head"].astype(jnp.float32), transposed=True)


def full_vocab_logits(frozen: dict, logits_xVd: jax.Array) -> jax.Array:
  """Draft-vocabulary logits placed in the whole vocabulary; tokens outside it get -inf (probability 0)."""
  vocab = frozen["embed"].shape[0]
  if frozen["head"].shape[0] == vocab:
    return logits_xVd
  full = jnp.full(logits_xVd.shape[:-1] + (vocab,), -jnp.inf, jnp.float32)
  return full.at[..., frozen["vocab_ids"]].set(logits_xVd)


def vocab_logits(frozen: dict, hidden_xD: jax.Array) -> jax.Array:
  """The head's logits over the whole vocabulary (-inf outside the draft vocabulary), [..., V]."""
  return full_vocab_logits(frozen, head_logits(frozen, hidden_xD))


def embed_tokens(frozen: dict, tokens) -> jax.Array:
  return jnp.take(frozen["embed"], tokens, axis=0).astype(jnp.float32)


def draw(frozen: dict, hidden_BxD: jax.Array, sampling, keys_B: jax.Array) -> tuple[jax.Array, jax.Array]:
  """One draft token per row and the q it was drawn from, through `specjax.sampling.distribution`."""
  return draw_tokens(keys_B, vocab_logits(frozen, hidden_BxD), sampling)


def most_frequent_tokens(counts_V: np.ndarray, size: int, always=(), tie_break_V=None) -> np.ndarray:
  """The `size` most frequent token ids, always including `always` (e.g. EOS); ties go to the larger
  tie_break_V count (e.g. frequencies in a broader text), then to the lower id. Sorted."""
  counts = np.asarray(counts_V, np.float64).copy()
  counts[list(always)] = np.inf
  secondary = np.zeros_like(counts) if tie_break_V is None else np.asarray(tie_break_V, np.float64)
  order = np.lexsort((np.arange(len(counts)), -secondary, -counts))
  return np.sort(order[:size]).astype(np.int32)
