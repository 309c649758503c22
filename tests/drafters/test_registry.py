"""The drafter registry, and docs/adding_a_drafter.md walked once as written: a throwaway drafter (the row's last
token, repeated) is written as a module would be, registered with one line, and then the CLI builds it, the
benchmark plans it and generation with it is exact."""

import jax.numpy as jnp
import pytest

import specjax
from configs import bench_cpu
from specjax.benchmark.plan import Cell, plan, validate_config
from specjax.cli import drafter_from_config
from specjax.drafters import Drafter, registry


# --- step 1 of the doc: the module --------------------------------------------------------------

class RepeatLast(Drafter):
  """Proposes the row's last token K times: deterministic (q = None, one-hot), no parameters, no state."""

  def __hash__(self):
    return hash(RepeatLast)

  def __eq__(self, other):
    return type(other) is RepeatLast

  def propose(self, params, state, tokens_BxS, seq_len_B, k, sampling, keys_B):
    last_Bx1 = jnp.take_along_axis(tokens_BxS, (seq_len_B - 1)[:, None], axis=1)
    return jnp.repeat(last_Bx1, k, axis=1), None, state


# --- step 2: the registry line (here at run time, removed after the test) -----------------------

@pytest.fixture
def repeat_last():
  entry = registry.register(registry.Entry("repeat_last", RepeatLast))
  yield entry
  registry.unregister("repeat_last")


# --- step 3: the tests ---------------------------------------------------------------------------

def test_the_cli_builds_it(repeat_last, exactness_target):
  assert isinstance(drafter_from_config("repeat_last", exactness_target), RepeatLast)
  assert registry.name_of(RepeatLast()) == "repeat_last"


def test_the_benchmark_plans_it(repeat_last):
  c = bench_cpu.get_config()
  c.methods = ("ar", "repeat_last")
  settings = validate_config(c)
  assert settings["methods"] == ("ar", "repeat_last")
  assert Cell("repeat_last", 1, 1, 0.0) in plan(settings)


def test_greedy_is_exactly_autoregressive(repeat_last, exactness_target, assert_greedy_is_autoregressive):
  stats = assert_greedy_is_autoregressive(exactness_target, drafter_from_config("repeat_last", exactness_target), 3)
  assert stats.rounds > 0


def test_sampling_is_exact(repeat_last, exactness_target, assert_exact):
  drafter = drafter_from_config("repeat_last", exactness_target)
  assert_exact(exactness_target, drafter, specjax.SamplingParams(temperature=1.0, top_k=3), k=2, seed=11)


def test_unregister_removes_it():
  before = registry.names()
  registry.register(registry.Entry("repeat_last", RepeatLast))
  assert registry.names() == before + ("repeat_last",)
  registry.unregister("repeat_last")
  assert registry.names() == before


# --- the registry itself -------------------------------------------------------------------------

def test_the_built_in_methods():
  assert set(registry.names()) == {"prompt_lookup", "draft_model", "layer_skip", "medusa", "feature_head", "quantized",
                                   "block_drafter"}
  assert set(registry.trainable()) == {"draft_model", "layer_skip", "medusa", "feature_head", "block_drafter"}
  assert ({n for n in registry.names() if registry.get(n).needs_trained_dir}
          == {"medusa", "feature_head", "block_drafter"})
  for name in registry.trainable():
    recipe = registry.get(name).training_recipe()
    assert callable(recipe.objective) and callable(recipe.layers)


def test_no_drafter_names(exactness_target):
  assert drafter_from_config("none", exactness_target) is None
  assert registry.build("ar", exactness_target) is None


def test_unknown_names_are_clear_errors(exactness_target):
  with pytest.raises(ValueError, match=r"unknown drafter 'eagle9'; known: \[.*'prompt_lookup'.*\]"):
    drafter_from_config("eagle9", exactness_target)
  with pytest.raises(ValueError, match="unknown drafter 'eagle9'"):
    registry.get("eagle9")
  with pytest.raises(ValueError, match="unknown drafter 'eagle9'"):
    registry.unregister("eagle9")
  c = bench_cpu.get_config()
  c.methods = ("ar", "eagle9")
  with pytest.raises(ValueError, match=r"unknown method\(s\) \['eagle9'\]; known: \['ar', "):
    validate_config(c)
  with pytest.raises(ValueError, match="not trainable; trainable kinds"):
    registry.get("prompt_lookup").training_recipe()


def test_bad_registrations():
  with pytest.raises(ValueError, match="taken"):
    registry.register(registry.Entry("medusa", RepeatLast))
  with pytest.raises(ValueError, match="taken"):
    registry.register(registry.Entry("none", RepeatLast))
  with pytest.raises(TypeError, match="not a specjax.drafters.Drafter"):
    registry.register(registry.Entry("plain", object))
  with pytest.raises(TypeError, match="no registered drafter"):
    registry.name_of(RepeatLast())
