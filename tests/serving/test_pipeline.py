"""The engine's pipelined steps (`Slots.advance`): each step is dispatched before the last one's readout is taken, a
row that finished meanwhile is advanced once more as a done row and its slot may be refilled before that readout
arrives; every request still gets exactly its own tokens, counted once."""

import pytest

import specjax
from specjax import drafters
from specjax.serving import Engine, Request, programs, slots

CONFIG = specjax.ModelConfig(vocab_size=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64,
                             max_seq_len=96)
DRAFT_CONFIG = CONFIG.replace(n_layers=1, d_model=16, n_heads=2, n_kv_heads=1, ffn_dim=24)
GREEDY = specjax.SamplingParams(temperature=0.0)
PROMPTS = [[1, 2, 3, 4, 5, 1, 2, 3], [7, 8], [9, 10, 11, 12, 9, 10], [4, 4, 5]]


@pytest.fixture(scope="module")
def target():
  return specjax.init_model(CONFIG, seed=1)


def _offline(target, prompt, max_tokens):
  return specjax.generate(target, [prompt], max_new_tokens=max_tokens, sampling=GREEDY).tokens[0]


def _tokens(handle):
  """The tokens the handle has received so far (taken from its queue: `result` gives the rest)."""
  return [t for update in handle.available() for t in update.token_ids]


def _run(engine, handles, limit=400):
  for _ in range(limit):
    if all(h.finished for h in handles):
      return
    engine.step()
  raise AssertionError("requests did not finish")


@pytest.mark.parametrize("pipeline", [True, False])
def test_a_step_is_dispatched_before_the_last_one_is_read(target, monkeypatch, pipeline):
  events = []
  step, take = programs.step_program, slots.Slots._take
  monkeypatch.setattr(programs, "step_program", lambda *a, **kw: events.append("dispatch") or step(*a, **kw))
  monkeypatch.setattr(slots.Slots, "_take", lambda self, flight: events.append("take") or take(self, flight))
  engine = Engine(target, slots=2, rounds_per_step=3, max_model_len=64, pipeline=pipeline)
  handle = engine.submit(Request(PROMPTS[0], 40, GREEDY))
  engine.step()
  # the first token comes from the admission; pipelined, the step's 3 follow with the next step's readout
  streamed = _tokens(handle)
  assert len(streamed) == (1 if pipeline else 4)
  engine.step(), engine.step()
  if pipeline:
    assert events == ["dispatch", "dispatch", "take", "dispatch", "take"]
  else:
    assert events == ["dispatch", "take"] * 3
  _run(engine, [handle])
  assert streamed + handle.result(timeout=0).token_ids == _offline(target, PROMPTS[0], 40)


@pytest.mark.parametrize("kind", ["autoregressive", "prompt_lookup", "draft_model"])
def test_slots_refilled_while_a_step_is_in_flight_give_each_request_its_own_tokens(target, kind):
  """One slot, so every request after the first is admitted into the slot of one that finished in the step before
  the one in flight; budgets end mid-step and at a step's end; one request is cancelled with a step in flight."""
  drafter = {"autoregressive": None, "prompt_lookup": drafters.PromptLookup(max_ngram=3),
             "draft_model": drafters.DraftModel(specjax.init_model(DRAFT_CONFIG, seed=2))}[kind]
  engine = Engine(target, drafter=drafter, k=None if drafter is None else 3, slots=1, rounds_per_step=2,
                  max_model_len=64)
  budgets = [5, 8, 11, 3]
  handles = [engine.submit(Request(prompt, budget, GREEDY)) for prompt, budget in zip(PROMPTS, budgets)]
  cancelled = engine.submit(Request(PROMPTS[0], 30, GREEDY))
  _run(engine, handles)
  engine.step()   # the cancelled one is admitted and stepped; its step is in flight
  cancelled.cancel()
  last = engine.submit(Request(PROMPTS[1], 9, GREEDY))
  _run(engine, [cancelled, last])
  results = [handle.result(timeout=0) for handle in handles + [last]]
  for result, prompt, budget in zip(results, PROMPTS + [PROMPTS[1]], budgets + [9]):
    assert result.token_ids == _offline(target, prompt, budget) and result.finish_reason == "length"
  stopped = cancelled.result(timeout=0)
  assert stopped.finish_reason == "cancelled"
  engine.step()   # nothing in flight is left behind: a step after the last request only takes its readout
  assert not engine.step() and engine.free_slots() == 1
  counters = engine.metrics.snapshot()
  delivered = sum(len(result.token_ids) for result in results)
  assert counters.generation_tokens - delivered == stopped.stats.completion_tokens
  assert counters.finished == {"length": 5, "cancelled": 1}


def test_pausing_delivers_the_step_in_flight(target):
  engine = Engine(target, slots=2, rounds_per_step=3, max_model_len=64)
  handle = engine.submit(Request(PROMPTS[1], 30, GREEDY))
  engine.step()
  assert len(_tokens(handle)) == 1
  with engine.paused():
    assert engine.step()   # reads the step in flight back, dispatches nothing
    assert len(_tokens(handle)) == 3 and not engine.step()


def test_the_adaptive_policy_reads_each_drafting_step_before_the_next(target):
  """Its K and the drafter's catch-up follow the last step's rounds, so its drafting steps are not pipelined."""
  engine = Engine(target, drafter=drafters.DraftModel(specjax.init_model(DRAFT_CONFIG, seed=2)), k="auto", slots=2,
                  rounds_per_step=3, max_model_len=64, round_costs={rows: (1.0, 1.0, 1.0, 1.0) for rows in (1, 2)},
                  served_costs=False)   # (served costs would time an autoregressive step first, pipelined)
  handle = engine.submit(Request(PROMPTS[2], 30, GREEDY))
  engine.step()
  streamed = _tokens(handle)
  assert len(streamed) > 1
  _run(engine, [handle])
  assert streamed + handle.result(timeout=0).token_ids == _offline(target, PROMPTS[2], 30)


def test_the_adaptive_policys_autoregressive_steps_are_pipelined_and_a_drafting_one_waits_for_them(target, monkeypatch):
  """Where no K pays at one row (the drafter left behind), the policy's K=0 steps are pipelined as the autoregressive
  engine's are; when a second row makes drafting worth a probe, the steps in flight are taken first, so the
  drafter catches up on every token they committed (the target as its own draft: each draft is then accepted)."""
  events = []
  step, take = programs.step_program, slots.Slots._take
  monkeypatch.setattr(programs, "step_program", lambda *a, k=None, **kw: events.append(k) or step(*a, k=k, **kw))
  monkeypatch.setattr(slots.Slots, "_take", lambda self, flight: events.append("take") or take(self, flight))
  policy = specjax.SpeculationPolicy(probe_budget=1.0, probe_interval=2)
  engine = Engine(target, drafter=drafters.DraftModel(target), k=policy, slots=2, rounds_per_step=2,
                  max_model_len=64, round_costs={1: (1.0, 2.2, 3.5, 5.5), 2: (1.0, 1.5, 2.5, 4.5)},
                  served_costs=False)
  first = engine.submit(Request(PROMPTS[0], 24, GREEDY))
  for _ in range(3):
    engine.step()
  assert events == [0, 0, "take", 0, "take"]
  second = engine.submit(Request(PROMPTS[3], 12, GREEDY))
  events.clear()
  engine.step()
  assert events[:2] == ["take", 1] and events[2] == "take"   # the last K=0 step taken, then a probe taken at once
  assert engine.metrics.snapshot().catch_ups == 1
  _run(engine, [first, second])
  results = [first.result(timeout=0), second.result(timeout=0)]
  assert [r.token_ids for r in results] == [_offline(target, PROMPTS[0], 24), _offline(target, PROMPTS[3], 12)]
  for r in results:
    assert r.stats.draft_tokens >= 1 and r.stats.accepted_tokens == r.stats.draft_tokens


def test_a_step_in_flight_during_an_admission_is_not_timed(target, monkeypatch):
  """The prefill of a request admitted while a step is in flight runs before that step's readout is taken: the
  served round costs (what the adaptive policy chooses K by) must not count it as the step's time."""
  clock, admit = [0.0], slots.Slots.admit

  def slow_admit(self, batch, spec):
    clock[0] += 10.0   # a prefill of 10 s on the served clock
    return admit(self, batch, spec)

  monkeypatch.setattr(slots.Slots, "admit", slow_admit)
  engine = Engine(target, slots=2, rounds_per_step=2, max_model_len=64)
  engine._slots.clock = lambda: clock[0]
  first = engine.submit(Request(PROMPTS[0], 30, GREEDY))
  engine.step(), engine.step()
  assert engine._slots.in_flight
  second = engine.submit(Request(PROMPTS[1], 10, GREEDY))
  _run(engine, [first, second])
  recorded = [ms for times in engine._slots.served._ms.values() for ms in times]
  assert recorded and max(recorded) < 1000.0   # without the rule: the step in flight took 10 s over 2 rounds
