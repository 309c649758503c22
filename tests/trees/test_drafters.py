"""Every drafter drafts trees, static and dynamic: greedy tree speculation equals autoregressive greedy token for
token (tiny models, ragged batches; the real SmolLM2 with prompts of different lengths at batch 1 and 4), sampled
trees keep the target's joint distribution, and what cannot branch or is too deep is named."""

import jax
import numpy as np
import pytest

import specjax
from specjax import drafters
from specjax.drafters.base import Drafter
from specjax.drafters.feature_head import FeatureHead
from specjax.drafters.medusa import MedusaConfig, MedusaHeads
from test_rejection import ALPHA, N_TOKENS, PROMPT, SAMPLES, TARGET_CONFIG, VOCAB, chi_square_pvalue, target_joint

GREEDY = specjax.SamplingParams(temperature=0.0)
STATIC = specjax.StaticTree(((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0)))
DYNAMIC = specjax.DynamicTree(nodes=8, depth=3, top_k=3)
PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4], [3, 1], [5, 5, 2, 7, 5, 5]]


def perturbed(head, seed, scale):
  key = jax.random.key(seed)
  return head.with_net(jax.tree.map(lambda x: x + scale * jax.random.normal(key, x.shape), head.net))


@pytest.fixture(scope="module")
def target():
  return specjax.init_model(TARGET_CONFIG, seed=3)


@pytest.fixture(scope="module")
def tiny_drafters(target):
  other = specjax.init_model(TARGET_CONFIG, seed=11)
  return {"draft_model": drafters.DraftModel(other),
          "quantized": drafters.QuantizedDraft.from_model(other, "int8"),
          "layer_skip": drafters.LayerSkip.create(target, n_layers=1),
          "feature_head": perturbed(FeatureHead.create(target), 1, 0.05),
          "medusa": perturbed(MedusaHeads.create(target), 2, 0.5),
          "prompt_lookup": drafters.PromptLookup()}


@pytest.fixture(scope="module")
def tiny_greedy(target):
  return specjax.generate(target, PROMPTS, max_new_tokens=20, sampling=GREEDY, stop_at_eos=False).tokens


@pytest.mark.parametrize("name,tree", [
    ("draft_model", DYNAMIC), ("quantized", specjax.DynamicTree(6, 2, 3, "sample")), ("quantized", STATIC),
    ("layer_skip", STATIC),
    ("feature_head", DYNAMIC), ("feature_head", STATIC), ("medusa", DYNAMIC), ("medusa", STATIC),
    ("prompt_lookup", DYNAMIC), ("prompt_lookup", specjax.StaticTree(STATIC.paths, "sample"))])
def test_greedy_tree_equals_autoregressive(target, tiny_drafters, tiny_greedy, name, tree):
  result = specjax.generate(target, PROMPTS, max_new_tokens=20, sampling=GREEDY, stop_at_eos=False,
                            drafter=tiny_drafters[name], tree=tree)
  assert result.tokens == tiny_greedy


@pytest.mark.parametrize("name,tree,sampling", [
    ("feature_head", specjax.DynamicTree(6, 3, 3, "sample"), specjax.SamplingParams(temperature=1.5)),
    ("prompt_lookup", specjax.DynamicTree(4, 2, 2, "sample"), specjax.SamplingParams(temperature=1.0, top_p=0.8)),
])
def test_sampled_tree_joint_equals_target(target, tiny_drafters, name, tree, sampling):
  result = specjax.generate(target, [PROMPT] * SAMPLES, max_new_tokens=N_TOKENS, sampling=sampling, seed=7,
                            drafter=tiny_drafters[name], stop_at_eos=False, tree=tree)
  counts = np.bincount(np.ravel_multi_index(np.array(result.tokens).T, [VOCAB] * N_TOKENS),
                       minlength=VOCAB**N_TOKENS)
  assert chi_square_pvalue(counts, target_joint(target, PROMPT, sampling)) > ALPHA


class ChainOnly(Drafter):
  """Proposes the last token again: a drafter with no way to rank several children."""

  def propose(self, params, state, tokens_BxS, seq_len_B, k, sampling, keys_B):
    last_B = tokens_BxS[np.arange(tokens_BxS.shape[0]), seq_len_B - 1]
    return np.repeat(last_B[:, None], k, axis=1), None, state


def test_what_cannot_draft_the_tree_is_named(target):
  with pytest.raises(ValueError, match="ChainOnly cannot draft a tree"):
    specjax.generate(target, [PROMPT], max_new_tokens=4, drafter=ChainOnly(), tree=DYNAMIC)
  heads = MedusaHeads.create(target, MedusaConfig.for_target(target.config, n_heads=2))
  with pytest.raises(ValueError, match="3 levels deep; MedusaHeads drafts at most 2"):
    specjax.generate(target, [PROMPT], max_new_tokens=4, drafter=heads, tree=DYNAMIC)
  with pytest.raises(ValueError, match="exceeds the target's max_seq_len"):
    specjax.generate(target, [PROMPT], max_new_tokens=TARGET_CONFIG.max_seq_len - 12, drafter=drafters.PromptLookup(),
                     tree=specjax.DynamicTree(16, 6, 4))


@pytest.fixture(scope="module")
def smollm2_prompts(smollm2_model):
  tokenizer = smollm2_model.tokenizer
  code = tokenizer.encode("def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fib")
  prose = tokenizer.encode("The quick brown fox jumps over the lazy dog near the river bank. The quick")
  return {1: [code], 4: [code, prose, code[:-5], prose[:-7]]}


@pytest.fixture(scope="module")
def smollm2_greedy(smollm2_model, smollm2_prompts):
  return {batch: specjax.generate(smollm2_model, prompts, max_new_tokens=20, sampling=GREEDY,
                                  stop_at_eos=False).tokens for batch, prompts in smollm2_prompts.items()}


@pytest.mark.parametrize("name,batch", [("feature_head", 4), ("medusa", 1), ("prompt_lookup", 4)])
def test_smollm2_tree_greedy_equals_greedy(smollm2_model, smollm2_prompts, smollm2_greedy, name, batch):
  """Untrained heads (the feature head's random block, Medusa's heads at zero: the target's own head) and prompt
  lookup, each with a dynamic tree of 16 nodes (Medusa: a static one from its heads' top choices)."""
  drafter = {"feature_head": lambda: FeatureHead.create(smollm2_model),
             "medusa": lambda: MedusaHeads.create(smollm2_model),
             "prompt_lookup": drafters.PromptLookup}[name]()
  tree = (specjax.StaticTree(((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (0, 0, 0, 0)))
          if name == "medusa" else specjax.DynamicTree(16, 5, 4))
  result = specjax.generate(smollm2_model, smollm2_prompts[batch], max_new_tokens=20, sampling=GREEDY,
                            drafter=drafter, tree=tree, stop_at_eos=False)
  assert result.tokens == smollm2_greedy[batch]
  if name == "medusa":  # zero heads are the target's head: every first draft is the target's next token
    assert result.stats.rounds < 20
