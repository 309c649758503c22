"""Shared fixtures: the real SmolLM2-135M GGUF (specjax and HF transformers views of it), loaded once."""

import functools
import gc
import os

# Eight host devices for the sharding tests; must be set before jax initialises its backend.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # libtpu (the tpu extra, for AOT compiles) must not probe for chips
# The packed kernel from one row, on every CPU with AVX-512: tests check both kernels' tokens the same way on every
# machine and skip each model's timing of the two (`specjax.kernels.packed.calibrate`, tested on its own).
os.environ.setdefault("SPECJAX_PACKED_MIN_ROWS", "1")

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from specjax.cache import init_cache
from specjax.checkpoints import load_model
from specjax.checkpoints.load import resolve_known_model

jax.config.update("jax_numpy_rank_promotion", "raise")
# Compiled programs are reused across test runs (and by CI on the same machine).
jax.config.update("jax_compilation_cache_dir", os.path.expanduser("~/.cache/specjax/jax-test-cache"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


@pytest.fixture(scope="module", autouse=True)
def _drop_compiled_programs():
  """Frees every compiled program after each test module. Each XLA:CPU executable holds memory mappings, and one
  process running the whole suite otherwise passes the kernel's vm.max_map_count (65530), where compilation
  segfaults."""
  yield
  jax.clear_caches()
  gc.collect()


@functools.partial(jax.jit, static_argnums=0)
def _forward(graphdef, params, tokens_BxT, positions_BxT, cache):
  return nnx.merge(graphdef, params)(tokens_BxT, positions_BxT, cache)[0]


def last_logits(model, prompts) -> np.ndarray:
  """specjax float32 logits [B, V] at the last token of each prompt (a list of id lists), in one jitted call:
  prompts are right-padded, which causal attention makes invisible to the real positions."""
  lengths = [len(ids) for ids in prompts]
  tokens_BxT = np.zeros((len(prompts), max(lengths)), np.int32)
  for row, ids in enumerate(prompts):
    tokens_BxT[row, :len(ids)] = ids
  positions_BxT = np.broadcast_to(np.arange(tokens_BxT.shape[1], dtype=np.int32), tokens_BxT.shape)
  cache = init_cache(model.config, *tokens_BxT.shape)
  logits_BxTxV = _forward(model.graphdef, model.params, jnp.asarray(tokens_BxT), jnp.asarray(positions_BxT), cache)
  return np.asarray(logits_BxTxV)[np.arange(len(prompts)), np.asarray(lengths) - 1]


def attention_reference(q_BxTxHxD, k_BxSxKxD, v_BxSxKxD, positions_BxT) -> np.ndarray:
  """Plain float64 softmax attention of each query over cache positions <= its own (one layer's cache)."""
  q, k, v = (np.asarray(a, np.float64) for a in (q_BxTxHxD, k_BxSxKxD, v_BxSxKxD))
  batch, t_len, n_heads, head_dim = q.shape
  groups = n_heads // k.shape[2]
  out = np.zeros_like(q)
  for b in range(batch):
    for t in range(t_len):
      visible = positions_BxT[b, t] + 1
      for h in range(n_heads):
        scores = k[b, :visible, h // groups] @ q[b, t, h] / np.sqrt(head_dim)
        weights = np.exp(scores - scores.max())
        out[b, t, h] = weights @ v[b, :visible, h // groups] / weights.sum()
  return out


@pytest.fixture(scope="session")
def dense_attention():
  return attention_reference


@pytest.fixture(scope="session")
def specjax_last_logits():
  """`last_logits(model, prompts)` for tests in any module."""
  return last_logits


@pytest.fixture(scope="session")
def smollm2_path() -> str:
  try:
    return resolve_known_model("smollm2-135m")
  except FileNotFoundError as err:
    pytest.skip(str(err))


@pytest.fixture(scope="session")
def smollm2_model(smollm2_path):
  return load_model(smollm2_path)


@pytest.fixture(scope="session")
def hf_smollm2(smollm2_path):
  """The HF transformers (torch, float32) model read from the same GGUF: the independent reference."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  model = transformers.AutoModelForCausalLM.from_pretrained(
      os.path.dirname(smollm2_path), gguf_file=os.path.basename(smollm2_path), dtype=torch.float32)
  return model.eval()


@pytest.fixture(scope="session")
def hf_smollm2_tokenizer(smollm2_path):
  transformers = pytest.importorskip("transformers")
  return transformers.AutoTokenizer.from_pretrained(os.path.dirname(smollm2_path),
                                                    gguf_file=os.path.basename(smollm2_path))


TINY_CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="session")
def tiny_tokenizer():
  """A 263-token byte-level BPE with ChatML control tokens, built from GGUF-style metadata (no files needed)."""
  from tokenizers import pre_tokenizers

  from specjax.tokenizer import Tokenizer
  specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
  tokens = specials + sorted(pre_tokenizers.ByteLevel.alphabet()) + ["he", "ll", "hell", "hello"]
  return Tokenizer.from_gguf_metadata({
      "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm", "tokenizer.ggml.tokens": tokens,
      "tokenizer.ggml.merges": ["h e", "l l", "he ll", "hell o"],
      "tokenizer.ggml.token_type": [3] * len(specials) + [1] * (len(tokens) - len(specials)),
      "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.chat_template": TINY_CHAT_TEMPLATE,
  })
