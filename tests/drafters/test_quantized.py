"""QuantizedDraft: the target's own weights quantized (int8, q4) or a GGUF's own blocks; exact under greedy and
sampling, on a tiny random model and the real SmolLM2; the registry's "quantized" method; bad input."""

import numpy as np
import pytest

import specjax
from specjax.drafters import QuantizedDraft, registry
from specjax.quantize import weight_schemes
from specjax.sampling import SamplingParams

CONFIG = specjax.ModelConfig(vocab_size=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64,
                             max_seq_len=128)
GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def target():
  return specjax.init_model(CONFIG, seed=4)


@pytest.mark.parametrize("scheme", ["int8", "q4"])
def test_greedy_is_autoregressive(target, scheme, assert_greedy_is_autoregressive):
  for k in (2, 4):
    assert_greedy_is_autoregressive(target, QuantizedDraft.from_model(target, scheme), k=k)


@pytest.mark.parametrize("scheme,sampling,k,seed", [
    ("int8", SamplingParams(temperature=1.0), 2, 41),
    ("q4", SamplingParams(temperature=1.0), 3, 42),
    ("q4", SamplingParams(temperature=0.7, top_k=4, top_p=0.9), 2, 43),
])
def test_exact(exactness_target, assert_exact, scheme, sampling, k, seed):
  stats = assert_exact(exactness_target, QuantizedDraft.from_model(exactness_target, scheme), sampling, k=k, seed=seed)
  assert stats.acceptance_rate > 0.5  # the target's own weights: drafts agree with it most of the time


def test_schemes_and_hashing(target):
  q4, int8 = QuantizedDraft.from_model(target), QuantizedDraft.from_model(target, "int8")
  assert set(weight_schemes(q4.model).values()) == {"q4_1", "q8_0"} and weight_schemes(q4.model)["embed"] == "q8_0"
  assert set(weight_schemes(int8.model).values()) == {"int8"}
  assert q4 == QuantizedDraft.from_model(target, "q4") and hash(q4) == hash(QuantizedDraft.from_model(target))
  assert q4 != int8 and q4.vocab_size == CONFIG.vocab_size and q4.model.config == target.config


def test_registry_builds_it(target, smollm2_path):
  assert registry.name_of(registry.build("quantized", target)) == "quantized"
  assert set(weight_schemes(registry.build("quantized", target, "").model).values()) == {"q4_1", "q8_0"}
  assert set(weight_schemes(registry.build("quantized", target, "int8").model).values()) == {"int8"}
  with pytest.raises(ValueError, match=r"draft_source 'int8' or 'q4'.*\.gguf file, got 'q3'"):
    registry.build("quantized", target, "q3")
  with pytest.raises(ValueError, match="vocabulary size 49152, the target 32"):
    registry.build("quantized", target, smollm2_path)


def test_bad_input(target):
  with pytest.raises(ValueError, match=r"unknown QuantizedDraft scheme 'q8'; use one of \['int8', 'q4'\]"):
    QuantizedDraft.from_model(target, "q8")
  with pytest.raises(ValueError, match="needs a model with quantized weights"):
    QuantizedDraft(target)
  with pytest.raises(TypeError, match="Model"):
    QuantizedDraft.from_model("smollm2-135m")
  other = QuantizedDraft.from_model(specjax.init_model(CONFIG.replace(vocab_size=64)), "int8")
  with pytest.raises(ValueError, match="vocabulary size 64 differs from the target's 32"):
    specjax.generate(target, [[1, 2, 3]], max_new_tokens=4, sampling=GREEDY, drafter=other, k=2)
  narrow = specjax.init_model(CONFIG.replace(d_model=48))
  with pytest.raises(ValueError, match=r"of shape \(\d+, 48\) to q4_1: .*not a multiple of the block size 32"):
    QuantizedDraft.from_model(narrow, "q4")


# ---- the real SmolLM2-135M: its own Q4_1 / Q8_0 blocks, and an int8 copy of the fp32 target ------------------


@pytest.fixture(scope="module")
def smollm2_drafts(smollm2_model, smollm2_path):
  return {"q4": QuantizedDraft.from_gguf(smollm2_path, smollm2_model),
          "int8": QuantizedDraft.from_model(smollm2_model, "int8")}


def test_smollm2_q4_requantized_is_the_files_own_blocks(smollm2_model, smollm2_drafts):
  """The fp32 target is the file's Q4_1 / Q8_0 blocks dequantized; "q4" (q4_1 linears, a q8_0 embedding) quantizes
  them back to exactly those blocks, so the q4 self-draft is llama.cpp's pair bit for bit."""
  requantized = QuantizedDraft.from_model(smollm2_model, "q4").model.flat_params()
  kept = smollm2_drafts["q4"].model.flat_params()
  assert requantized.keys() == kept.keys() and weight_schemes(smollm2_drafts["q4"].model)["embed"] == "q8_0"
  for name, array in kept.items():
    np.testing.assert_array_equal(np.asarray(requantized[name]), np.asarray(array), err_msg=name)


@pytest.fixture(scope="module")
def smollm2_prompts(smollm2_model):
  tokenizer = smollm2_model.tokenizer
  a = tokenizer.encode("Write a Python function that checks whether a string is a palindrome.")
  b = tokenizer.encode("The quick brown fox jumps over the lazy dog near the river bank. The quick")
  return {1: [a], 4: [a, b, a[:-4], b[:-6]]}


@pytest.fixture(scope="module")
def smollm2_greedy(smollm2_model, smollm2_prompts):
  return {batch: specjax.generate(smollm2_model, prompts, max_new_tokens=24, sampling=GREEDY,
                                  stop_at_eos=False).tokens for batch, prompts in smollm2_prompts.items()}


# Both schemes, both batch sizes and every K of {2, 4, 8} (the whole 12-case grid passed once, about 11 minutes
# here, mostly compiling; CI runs these four).
@pytest.mark.parametrize("scheme,batch,k", [("q4", 1, 4), ("q4", 4, 8), ("int8", 1, 2), ("int8", 4, 4)])
def test_smollm2_speculative_greedy_equals_greedy(smollm2_model, smollm2_drafts, smollm2_prompts, smollm2_greedy,
                                                  scheme, batch, k):
  result = specjax.generate(smollm2_model, smollm2_prompts[batch], max_new_tokens=24, sampling=GREEDY,
                            drafter=smollm2_drafts[scheme], k=k, stop_at_eos=False)
  assert result.tokens == smollm2_greedy[batch]
  assert result.stats.acceptance_rate > 0.5


def test_drafts_in_the_targets_cache_and_never_changes_its_committed_entries(target):
  """A draft of the target's own layout keeps no cache (nothing prefilled, copied or caught up): it drafts in the
  target's, writing only from the unverified last token on, which the verification writes again."""
  import jax
  import jax.numpy as jnp
  from specjax import engine
  from specjax.host import prepare

  drafter = QuantizedDraft.from_model(target, "q4")
  assert drafter.shares_target_cache and not drafter.catches_up
  batch = prepare(target, [[1, 2, 3, 4, 5], [7, 6]], max_new_tokens=8, drafter=drafter, k=3)
  prompt_len_B = jnp.asarray(batch.prompt_len_B)
  state = engine.prefill_for(target.params, jnp.asarray(batch.tokens_BxS), prompt_len_B,
                             jnp.asarray(batch.max_new_B), jax.random.key(0), spec=batch.spec)
  state = engine.init_drafter(drafter, drafter.params(), state, prompt_len_B, batch.spec.prompt_bucket)
  assert state.draft_state == ()
  _, _, drafted = engine.draft(drafter, drafter.params(), state, k=3, sampling=GREEDY,
                               vocab_size=CONFIG.vocab_size)
  before, after = np.asarray(state.cache.k), np.asarray(drafted.cache.k)
  for row, seq_len in enumerate(np.asarray(state.seq_len_B)):
    np.testing.assert_array_equal(after[:, row, :seq_len - 1], before[:, row, :seq_len - 1])
    for position in range(seq_len - 1, seq_len + 2):   # the last token and the first two drafts
      assert (after[:, row, position] != before[:, row, position]).any()
    np.testing.assert_array_equal(after[:, row, seq_len + 2:], before[:, row, seq_len + 2:])


def test_a_draft_of_another_layout_keeps_its_own_cache(target, assert_greedy_is_autoregressive):
  shallow = specjax.init_model(CONFIG.replace(n_layers=1), seed=5)
  with pytest.raises(ValueError, match=r"drafts in the target's KV cache, but its cache layout .* \(1, 2, 8, "
                                       r".*build it with shares_target_cache=False"):
    specjax.generate(target, [[1, 2, 3]], max_new_tokens=4, sampling=GREEDY,
                     drafter=QuantizedDraft.from_model(shallow, "int8"), k=2)
  own = QuantizedDraft.from_model(shallow, "int8", shares_target_cache=False)
  assert own != QuantizedDraft.from_model(shallow, "int8") and own.catches_up
  assert_greedy_is_autoregressive(target, own, k=3)
  assert_greedy_is_autoregressive(target, QuantizedDraft.from_model(target, "q4", shares_target_cache=False), k=3)


def test_smollm2_tree_greedy_equals_greedy(smollm2_model, smollm2_drafts, smollm2_prompts, smollm2_greedy):
  """A static tree of 8 nodes over the q4 self-draft, batch 4 with ragged prompts: token for token."""
  from specjax.trees.static import StaticTree
  tree = StaticTree(((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (0, 0, 0, 0)))
  result = specjax.generate(smollm2_model, smollm2_prompts[4], max_new_tokens=24, sampling=GREEDY,
                            drafter=smollm2_drafts["q4"], tree=tree, stop_at_eos=False)
  assert result.tokens == smollm2_greedy[4]
  assert result.stats.rounds <= 12
