"""DecodeSpec: the one static argument of the programs, validated where it is made; one host path for a request."""

import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import drafters, engine, host
from specjax.policy import SpeculationPolicy
from specjax.spec import DecodeSpec, TargetSpec

CONFIG = specjax.ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64,
                             max_seq_len=128)
GREEDY = specjax.SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def target():
  return specjax.init_model(CONFIG, seed=0)


def _spec(target, **changes):
  fields = dict(graphdef=target.graphdef, drafter=drafters.PromptLookup(), sampling=GREEDY, k=3, eos_ids=(),
                prompt_bucket=16)
  fields.update(changes)
  return DecodeSpec(**fields)


def test_specs_are_hashable_and_equal_by_value(target):
  assert _spec(target) == _spec(target) and hash(_spec(target)) == hash(_spec(target))
  assert _spec(target) != _spec(target, kernels=False)
  assert _spec(target, k=SpeculationPolicy()).max_k == 4 and _spec(target).max_k == 3
  assert _spec(target, drafter=None, k=0).max_k == 0
  # The prefill depends on neither the drafter nor K: every method at one shape shares its program.
  assert _spec(target).prefill == _spec(target, drafter=None, k=0).prefill == _spec(target, k=1).prefill


def test_a_spec_hashes_its_graph_once_and_copies_keep_no_cached_hash(target, monkeypatch):
  """Every program call hashes its spec (jit's static arguments); the graphs in it are hashed once per spec. A
  copy or pickle carries no hash of this process (string hashes differ between processes)."""
  import copy
  import pickle
  spec = _spec(target)
  first = hash(spec)
  graph_hashes = []
  graph_type = type(target.graphdef)
  monkeypatch.setattr(graph_type, "__hash__", lambda self: graph_hashes.append(1) or 7)
  assert hash(spec) == first and hash(spec.target) == hash(spec.target) and graph_hashes == [1]   # target's own
  assert spec.target is spec.target and spec.prefill is spec.prefill
  monkeypatch.undo()
  for twin in (copy.copy(spec), pickle.loads(pickle.dumps(spec.replace(drafter=None, k=0)))):
    assert "_hash" not in twin.__dict__ and "target" not in twin.__dict__
  assert copy.copy(spec) == spec and hash(copy.copy(spec)) == first
  assert spec.replace(k=2) != spec and hash(spec.replace(k=2)) != first


@pytest.mark.parametrize("changes,match", [
    (dict(drafter=None, k=4), "needs a drafter"),
    (dict(drafter=None, k=SpeculationPolicy()), "needs a drafter"),
    (dict(k=0), "k >= 1"),
    (dict(k=-1), "int >= 0"),
    (dict(k="4"), "int >= 0"),
    (dict(prompt_bucket=0), "prompt_bucket"),
    (dict(mesh=object()), "kernels=False"),
])
def test_bad_specs_are_named(target, changes, match):
  with pytest.raises((ValueError, TypeError), match=match):
    _spec(target, **changes)


@pytest.mark.parametrize("k", [4, "auto", SpeculationPolicy()])
def test_k_without_a_drafter_is_an_error_naming_it(target, k):
  with pytest.raises(ValueError, match="needs a drafter"):
    specjax.generate(target, [[1, 2, 3]], max_new_tokens=4, k=k)


def test_kernel_routing_is_part_of_the_cache_key(target):
  """Two scoring programs that differ only in kernels compile twice (a contextvar would have shared one)."""
  tokens = jnp.ones((1, 2), jnp.int32)
  positions = jnp.arange(2, dtype=jnp.int32)[None]
  before = engine.score_program._cache_size()
  outputs = []
  for kernels in (True, False):
    cache = specjax.cache.init_cache(target.config, 1, 16)
    logits, _ = engine.score_program(target.params, tokens, positions, cache, spec=TargetSpec(target.graphdef,
                                                                                              kernels=kernels))
    outputs.append(np.asarray(logits))
  assert engine.score_program._cache_size() - before == 2
  np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-4, atol=1e-4)


def test_one_host_path_gives_generate_tokens(target):
  """prepare + run_batch (what the benchmark and calibration call) give exactly what generate gives."""
  prompts = [[1, 2, 3, 1, 2, 3], [5, 6]]
  result = specjax.generate(target, prompts, max_new_tokens=10, sampling=GREEDY, drafter=drafters.PromptLookup(), k=2)
  batch = host.prepare(target, prompts, max_new_tokens=10, sampling=GREEDY, drafter=drafters.PromptLookup(), k=2,
                       min_prompt_bucket=32, min_cache_size=96)
  assert batch.spec.prompt_bucket == 32 and batch.tokens_BxS.shape == (2, 128)
  out = host.run_batch(target, batch, seed=0)
  assert out.tokens == result.tokens
  assert host.run_batch(target, batch, seed=0, max_new_tokens=1).tokens == [t[:1] for t in result.tokens]


def test_prepare_checks_every_limit(target):
  short = specjax.init_model(CONFIG.replace(max_seq_len=32), seed=1)
  with pytest.raises(ValueError, match="drafter's max_seq_len"):
    host.prepare(target, [[1, 2, 3]], max_new_tokens=40, drafter=drafters.DraftModel(short), k=2)
  with pytest.raises(ValueError, match="target's max_seq_len"):
    host.prepare(target, [[1, 2, 3]], max_new_tokens=130)
  with pytest.raises(TypeError, match="SamplingParams"):
    host.prepare(target, [[1, 2, 3]], max_new_tokens=4, sampling=0.5)
