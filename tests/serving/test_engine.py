"""The continuous-batching engine on tiny random models, stepped by the test: requests arriving at different times,
one cancelled mid-way, several sampling groups at once; every greedy request gives exactly offline `generate`'s
tokens for its prompt alone, and every slot is free at the end."""

import os
import subprocess
import sys

import jax
import pytest

import specjax
from specjax import drafters
from specjax.serving import Engine, QueueFull, Request

CONFIG = specjax.ModelConfig(vocab_size=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64,
                             max_seq_len=160)
DRAFT_CONFIG = CONFIG.replace(n_layers=1, d_model=16, n_heads=2, n_kv_heads=1, ffn_dim=24)
GREEDY = specjax.SamplingParams(temperature=0.0)
# (prompt, max_tokens): budgets that end in different steps; one prompt bucket and one offline cache size, so that
# the offline references compile once
REQUESTS = [([1, 2, 3, 4, 5, 1, 2, 3], 24), ([7, 8], 30), ([9, 10, 11, 12, 13, 14, 15, 16, 9, 10, 11, 12, 13, 14], 17),
            ([4, 4, 5], 9), ([6, 1, 6, 1, 6], 21)]


@pytest.fixture(scope="module")
def target():
  return specjax.init_model(CONFIG, seed=1)


@pytest.fixture(scope="module")
def expected(target):
  """Offline greedy tokens of each request's prompt alone (autoregressive; greedy speculation gives the same, which
  tests/test_generate.py checks for every drafter)."""
  return [_offline(target, prompt, max_tokens) for prompt, max_tokens in REQUESTS]


def _drafter(kind):
  return {"autoregressive": lambda: None, "prompt_lookup": lambda: drafters.PromptLookup(max_ngram=3),
          "draft_model": lambda: drafters.DraftModel(specjax.init_model(DRAFT_CONFIG, seed=2))}[kind]()


def _offline(target, prompt, max_tokens):
  return specjax.generate(target, [prompt], max_new_tokens=max_tokens, sampling=GREEDY).tokens[0]


def _run_until_finished(engine, handles, limit=500):
  for _ in range(limit):
    if all(h.finished for h in handles):
      return
    engine.step()
  raise AssertionError("requests did not finish")


@pytest.mark.parametrize("kind", ["autoregressive", "prompt_lookup", "draft_model"])
def test_staggered_requests_equal_offline_generate(target, expected, kind):
  drafter = _drafter(kind)
  k = None if drafter is None else 3
  engine = Engine(target, drafter=drafter, k=k, slots=3, rounds_per_step=2, max_model_len=64)
  # two requests, two steps, then two more (one must wait for a slot), one cancelled mid-way, one arriving late
  h = [engine.submit(Request(*REQUESTS[i], GREEDY)) for i in (0, 1)]
  engine.step(), engine.step()
  h += [engine.submit(Request(*REQUESTS[i], GREEDY)) for i in (2, 3)]
  engine.step()
  assert engine.num_running == 3 and engine.num_waiting == 1
  partial = h[1].available()    # some tokens arrived and it is still running
  assert partial and not partial[-1].finished
  h[1].cancel()
  engine.step()
  h.append(engine.submit(Request(*REQUESTS[4], GREEDY)))
  _run_until_finished(engine, h)

  results = [handle.result(timeout=0) for handle in h]
  for i, result in enumerate(results):
    prompt, max_tokens = REQUESTS[i]
    if i == 1:
      assert result.finish_reason == "cancelled"
      streamed = [t for u in partial for t in u.token_ids] + result.token_ids
      assert 0 < len(streamed) < max_tokens and streamed == expected[i][:len(streamed)]
      continue
    assert result.token_ids == expected[i], f"request {i}"
    assert result.finish_reason == "length" and result.stats.completion_tokens == max_tokens
    stats = result.stats
    assert stats.rounds >= 1 and stats.prompt_tokens == len(prompt)
    # first token from prefill, then accepted + 1 per round (the last round cut at max_tokens)
    assert stats.rounds + stats.accepted_tokens >= max_tokens - 1
    if drafter is None:
      assert stats.draft_tokens == 0 and stats.acceptance_rate is None and stats.mean_acceptance_length == 1.0
    else:
      assert stats.draft_tokens == 3 * stats.rounds
      assert stats.acceptance_rate == pytest.approx(stats.accepted_tokens / stats.draft_tokens)
      assert stats.mean_acceptance_length == pytest.approx(1 + stats.accepted_tokens / stats.rounds)
  assert engine.free_slots() == 3 and engine.num_waiting == 0 and engine.num_running == 0
  counters = engine.metrics.snapshot()
  assert counters.finished == {"length": 4, "cancelled": 1}
  assert counters.prompt_tokens == sum(len(p) for p, _ in REQUESTS)
  if drafter is not None:
    done = [result.stats for i, result in enumerate(results) if i != 1]
    assert counters.num_drafts >= sum(s.rounds for s in done)
    assert counters.num_draft_tokens == 3 * counters.num_drafts
    assert counters.accepted_per_pos[0] >= counters.accepted_per_pos[1] >= counters.accepted_per_pos[2]
    assert sum(counters.accepted_per_pos) == counters.num_accepted_tokens


def test_sampling_groups_share_the_slots(target, expected):
  """A greedy and a sampled request in flight together: each sampling group runs its own step program with the other
  masked out and its rows restored, so the greedy one stays exact and the seeded sampled one draws the same tokens as
  when it runs alone (its random numbers depend on its own rounds only)."""
  drafter = drafters.DraftModel(specjax.init_model(DRAFT_CONFIG, seed=2))

  def serve(requests):
    engine = Engine(target, drafter=drafter, k=3, slots=2, rounds_per_step=3, max_model_len=64)
    handles = [engine.submit(r) for r in requests]
    _run_until_finished(engine, handles)
    assert engine.free_slots() == 2
    return [handle.result(timeout=0).token_ids for handle in handles]

  sampled = Request(REQUESTS[1][0], 20, specjax.SamplingParams(temperature=1.5, top_k=8), seed=7)
  together = serve([Request(*REQUESTS[0], GREEDY), sampled])
  alone = serve([sampled])
  assert together[0] == expected[0]
  assert together[1] == alone[0] and len(alone[0]) == 20


def test_a_tree_of_drafts_is_served_exactly(target, expected):
  """A static token tree (one target call over its nodes per round) in the step program: greedy stays exact."""
  drafter = drafters.DraftModel(specjax.init_model(DRAFT_CONFIG, seed=2))
  tree = specjax.StaticTree(((0,), (1,), (0, 0), (0, 0, 0)), "top_k")
  engine = Engine(target, drafter=drafter, tree=tree, slots=2, rounds_per_step=3, max_model_len=64)
  handles = [engine.submit(Request(*REQUESTS[i], GREEDY)) for i in (0, 2)]
  engine.step()
  handles.append(engine.submit(Request(*REQUESTS[4], GREEDY)))   # waits for a slot
  _run_until_finished(engine, handles)
  for i, handle in zip((0, 2, 4), handles):
    result = handle.result(timeout=0)
    assert result.token_ids == expected[i]
    assert result.stats.draft_tokens == 4 * result.stats.rounds
  assert engine.free_slots() == 2


def test_eos_ends_a_request_and_frees_its_slot(target, expected):
  reference = expected[0]
  eos = reference[5]
  model = specjax.Model(target.config.replace(eos_token_ids=(eos,)), target.graphdef, target.params)
  engine = Engine(model, drafter=drafters.PromptLookup(), k=3, slots=2, rounds_per_step=4, max_model_len=64)
  stop = engine.submit(Request(*REQUESTS[0], GREEDY))
  free = engine.submit(Request(*REQUESTS[0], GREEDY, stop_at_eos=False))
  _run_until_finished(engine, [stop, free])
  stopped, ignored = stop.result(timeout=0), free.result(timeout=0)
  assert stopped.token_ids == reference[:reference.index(eos) + 1] and stopped.finish_reason == "stop"
  assert ignored.token_ids == reference and ignored.finish_reason == "length"
  assert engine.free_slots() == 2


def test_bounds_and_bad_requests_are_named(target):
  engine = Engine(target, slots=1, max_queue=1, max_model_len=40, max_sampling_settings=2)
  with pytest.raises(ValueError, match="maximum context length is 40"):
    engine.submit(Request([1] * 30, 11, GREEDY))
  with pytest.raises(ValueError, match="outside the vocabulary"):
    engine.submit(Request([1, 99], 4, GREEDY))
  with pytest.raises(ValueError, match="empty"):
    engine.submit(Request([], 4, GREEDY))
  with pytest.raises(ValueError, match="max_tokens"):
    Request([1], 0, GREEDY)
  with engine.paused():
    # one slot + one queue place, two sampling settings
    waiting = [engine.submit(Request([1, 2], 4, sampling)) for sampling in (GREEDY, specjax.SamplingParams(0.5))]
    with pytest.raises(ValueError, match="at most 2 sampling settings"):
      engine.submit(Request([1, 2], 4, specjax.SamplingParams(0.7)))
    with pytest.raises(QueueFull):
      engine.submit(Request([1, 2], 4, GREEDY))
    assert engine.metrics.snapshot().rejected_queue_full == 1
  for handle in waiting:
    handle.cancel()
  engine.step()
  assert all(h.result(timeout=0).finish_reason == "cancelled" for h in waiting)
  assert engine.num_waiting == 0 and engine.free_slots() == 1
  with pytest.raises(ValueError, match="round_costs are the adaptive policy's"):
    Engine(target, drafter=drafters.PromptLookup(), k=2, round_costs={1: (1.0, 1.1)})
  with pytest.raises(ValueError, match="shrink_after"):
    Engine(target, shrink_after=0)
  engine = Engine(target, drafter=drafters.PromptLookup(), k="auto", slots=1, round_costs={1: (1.0, 1.1)})
  with pytest.raises(ValueError, match=r"round costs at 1 rows must be 4 positive numbers"):
    engine.warmup()


def test_a_burst_of_admissions_is_prefilled_together(target, expected, monkeypatch):
  """Requests admitted in one step share their prefill per sampling group and prompt bucket, in calls of a power of
  two rows; greedy ones still give offline's tokens and a seeded sampled one the tokens it draws when served alone."""
  from specjax.serving import programs
  rows, widths, admit_program = [], [], programs.admit_program
  monkeypatch.setattr(programs, "admit_program", lambda *args, **kwargs: rows.append(args[2].shape[0]) or
                      widths.append(args[2].shape[1]) or admit_program(*args, **kwargs))
  sampling = specjax.SamplingParams(temperature=1.5, top_k=8)

  def engine():
    return Engine(target, drafter=_drafter("draft_model"), k=2, slots=8, rounds_per_step=2, max_model_len=64)

  alone = engine()
  handle = alone.submit(Request(REQUESTS[4][0], 9, sampling, seed=3))
  _run_until_finished(alone, [handle])
  rows.clear()
  widths.clear()
  burst = engine()
  greedy = [burst.submit(Request(*request, GREEDY)) for request in REQUESTS]           # one prompt bucket
  seeded = [burst.submit(Request(REQUESTS[i][0], 9, sampling, seed=seed)) for i, seed in ((4, 3), (0, 5))]
  _run_until_finished(burst, greedy + seeded)
  assert rows == [1, 4, 1, 2]      # the blank row, then the five greedy requests as 4 + 1, the two sampled ones
  assert widths == [burst.size, 32, 32, 32]   # admissions prefill their bucket (16) and first token, not all 128
  assert [h.result(timeout=0).token_ids for h in greedy] == expected
  assert seeded[0].result(timeout=0).token_ids == handle.result(timeout=0).token_ids
  assert burst.free_slots() == 8


def test_a_slot_reused_by_a_shorter_request_ignores_what_its_last_one_left(target, expected):
  """A freed slot keeps the last request's cache entries and tokens past the next one's prompt (admissions write
  only their own prefix): nothing reads them, so the next request still gives offline's tokens."""
  engine = Engine(target, drafter=_drafter("draft_model"), k=2, slots=1, rounds_per_step=2, max_model_len=64)
  first = engine.submit(Request(REQUESTS[2][0], 40, GREEDY, stop_at_eos=False))   # fills positions 0..53
  second = engine.submit(Request(*REQUESTS[1], GREEDY))                             # admitted at 32 positions
  _run_until_finished(engine, [first, second])
  assert len(first.result(timeout=0).token_ids) == 40
  assert second.result(timeout=0).token_ids == expected[1]


def test_warmup_compiles_the_admissions_of_each_burst_size(target):
  from specjax.serving import programs
  engine = Engine(target, slots=4, rounds_per_step=2, max_model_len=64)
  engine.warmup(prompt_lengths=(5,), admit_rows=(1, 2, 4), all_buckets=False)
  compiled = programs.admit_program._cache_size()
  burst = [engine.submit(Request(REQUESTS[i][0], 3, GREEDY)) for i in (0, 1, 3, 4)]   # one prompt bucket, 4 rows
  _run_until_finished(engine, burst)
  assert programs.admit_program._cache_size() == compiled


def test_warmup_compiles_the_step_of_every_row_bucket(target):
  """The warmup serves one request at a time (1 row); the steps of the larger row buckets a burst needs were
  compiled by `all_buckets` as serving calls them (a burst compiles none)."""
  from specjax.serving import programs
  engine = Engine(target, slots=4, rounds_per_step=3, max_model_len=48)   # shapes of this test alone
  engine.warmup(prompt_lengths=(5,))
  compiled = programs.step_program._cache_size()
  burst = [engine.submit(Request(REQUESTS[i][0], 3, GREEDY)) for i in (0, 1, 3, 4)]
  engine.step()
  assert engine.metrics.snapshot().state_rows == 4
  _run_until_finished(engine, burst)
  assert programs.step_program._cache_size() == compiled


@pytest.mark.parametrize("spare_states", [True, False])
def test_rows_follow_the_load(target, expected, spare_states):
  """The state grows to the row bucket the requests need and, once they fit a smaller one, moves the survivors to
  the lowest rows and shrinks: the moved request (and its draft model's cache) still gives offline's tokens."""
  engine = Engine(target, drafter=_drafter("draft_model"), k=2, slots=4, rounds_per_step=2, max_model_len=64,
                  shrink_after=2, spare_states=spare_states)
  short = [engine.submit(Request(REQUESTS[i][0], 4, GREEDY)) for i in (0, 1)]
  engine.step()   # a burst of two admissions: the state is made at 2 rows at once, not grown 1 -> 2
  assert engine.metrics.snapshot().state_rows == 2 and engine.metrics.snapshot().state_resizes == 0
  long = engine.submit(Request(*REQUESTS[2], GREEDY))       # the third slot: the state grows to 4 rows
  engine.step()
  assert engine.metrics.snapshot().state_rows == 4 and engine._slots.slot_of(long) == 2
  _run_until_finished(engine, short)
  for _ in range(3):
    engine.step()
  assert engine.metrics.snapshot().state_rows == 1 and engine._slots.slot_of(long) == 0
  _run_until_finished(engine, [long])
  assert long.result(timeout=0).token_ids == expected[2]
  assert [h.result(timeout=0).token_ids for h in short] == [expected[i][:4] for i in (0, 1)]
  assert engine.metrics.snapshot().state_resizes == 2 and engine.free_slots() == 4   # 2 -> 4 -> 1 rows
  assert sorted(engine._slots.spare) == ([2, 4] if spare_states else [])


def _buffer(state):
  return jax.tree.leaves(state.cache)[0].unsafe_buffer_pointer()


def test_resizes_write_into_the_states_they_left(target, expected):
  """Warmup makes a state of every row bucket, runs the moves between them and compiles every admission's write
  into each; serving then resizes into those buffers and admits (no state allocated, no program compiled), and
  requests in rows that held others' tokens still give offline's tokens."""
  from specjax.serving import programs
  engine = Engine(target, drafter=_drafter("draft_model"), k=2, slots=4, rounds_per_step=2, max_model_len=64,
                  shrink_after=1)
  engine.warmup(prompt_lengths=(8, 14), admit_rows=(1, 2))
  assert sorted(engine._slots.spare) == [b for b in (1, 2, 4) if b != engine._slots.capacity]
  buffer_4, allocations = _buffer(engine._slots.spare[4]), programs.resize_rows._cache_size()
  writes, admissions = programs.write_rows._cache_size(), programs.admit_program._cache_size()
  for burst in ((0, 1, 2), (2, 0, 4)):   # 3 rows (4-row state: 2 + 1 admitted), back to 1 row, then 3 rows again
    handles = [engine.submit(Request(*REQUESTS[i], GREEDY)) for i in burst]
    engine.step()
    assert engine._slots.capacity == 4 and _buffer(engine._slots.state) == buffer_4
    _run_until_finished(engine, handles)
    assert [h.result(timeout=0).token_ids for h in handles] == [expected[i] for i in burst]
    for _ in range(2):
      engine.step()
    assert engine._slots.capacity == 1
  assert programs.write_rows._cache_size() == writes and programs.resize_rows._cache_size() == allocations
  assert programs.admit_program._cache_size() == admissions
  late = [engine.submit(Request(*REQUESTS[i], GREEDY)) for i in (1, 3)]   # 2 rows admitted into a 1-row state's
  engine.step()                                                          # bucket grown to 2, then one more row
  late.append(engine.submit(Request(*REQUESTS[4], GREEDY)))              # into the 4-row state
  _run_until_finished(engine, late)
  assert [h.result(timeout=0).token_ids for h in late] == [expected[i] for i in (1, 3, 4)]
  assert programs.write_rows._cache_size() == writes


def test_the_adaptive_policy_is_served_exactly_and_sees_the_load(target, expected):
  """K = 'auto' on the served rows' round costs: drafting where a round costs what a step does (1 row here), off
  where verification is dear (2 rows), and greedy tokens exact either way."""
  costs = {1: (1.0, 1.0, 1.0, 1.0), 2: (1.0, 6.0, 7.0, 9.0)}
  engine = Engine(target, drafter=drafters.DraftModel(target), k="auto", slots=2, rounds_per_step=3,
                  max_model_len=64, round_costs=costs, served_costs=False)   # the target as its own draft
  alone = engine.submit(Request(*REQUESTS[0], GREEDY))
  _run_until_finished(engine, [alone])
  pair = [engine.submit(Request(REQUESTS[i][0], 9, GREEDY)) for i in (1, 3)]   # both active until the end
  _run_until_finished(engine, pair)
  alone, pair = alone.result(timeout=0), [h.result(timeout=0) for h in pair]
  assert alone.token_ids == expected[0] and [r.token_ids for r in pair] == [expected[1][:9], expected[3]]
  # the first step (3 rounds) starts small at K=1, then K=4 (the largest of the policy's K): drafting pays
  assert alone.stats.draft_tokens == 3 * 1 + 4 * (alone.stats.rounds - 3)
  assert [r.stats.draft_tokens for r in pair] == [0, 0]
  assert engine.round_costs == {1: [1.0] * 4, 2: [1.0, 6.0, 7.0, 9.0]}


def test_an_unmeasured_drafter_is_probed_by_the_first_request_however_short(target, expected):
  """At SmolLM2's one-row costs the prior (alpha 0.5) says no K pays, and a short request alone would never be
  worth a probe; but what the probe learns serves every later request, so the first step after warmup (whose
  throwaway prompts teach the policy nothing) drafts at K=1, and once the target-as-draft is seen to match, K=4."""
  costs = {1: (1.0, 1.8, 2.3, 3.6)}
  engine = Engine(target, drafter=drafters.DraftModel(target), k="auto", slots=1, rounds_per_step=2,
                  max_model_len=64, round_costs=costs, served_costs=False)
  engine.warmup(prompt_lengths=(5,))
  assert engine._slots.speculation is None
  first = engine.submit(Request(REQUESTS[1][0], 9, GREEDY))
  _run_until_finished(engine, [first])
  result = first.result(timeout=0)
  assert result.token_ids == expected[1][:9]
  assert result.stats.draft_tokens == 2 * 1 + 4 * (result.stats.rounds - 2) and result.stats.rounds > 2
  assert result.stats.accepted_tokens == result.stats.draft_tokens


def test_autoregressive_steps_leave_the_drafter_behind_and_it_catches_up(target, expected):
  """Where drafting cannot pay (one row here: no K would even with every draft accepted) the policy's
  autoregressive steps run without the draft model; once a second request makes drafting worth a probe (two rows),
  the draft model first takes in what those steps committed (ragged: the second row has nothing to take in). With
  the target as its own draft, every draft is then accepted (a stale draft cache would propose other tokens)."""
  costs = {1: (1.0, 2.2, 3.5, 5.5), 2: (1.0, 1.5, 2.5, 4.5)}
  policy = specjax.SpeculationPolicy(probe_budget=1.0, probe_interval=2)
  engine = Engine(target, drafter=drafters.DraftModel(target), k=policy, slots=2, rounds_per_step=2,
                  max_model_len=64, round_costs=costs, served_costs=False)
  first = engine.submit(Request(*REQUESTS[1], GREEDY))
  for _ in range(3):
    engine.step()
  engine._slots.drain()   # the last autoregressive step is in flight (pipelined)
  assert engine._slots.table[0].draft_lag == 3 * 2 and engine.metrics.snapshot().catch_ups == 0
  second = engine.submit(Request(*REQUESTS[0], GREEDY))
  _run_until_finished(engine, [first, second])
  results = [first.result(timeout=0), second.result(timeout=0)]
  assert [r.token_ids for r in results] == [expected[1], expected[0]]
  assert engine.metrics.snapshot().catch_ups >= 1
  for r in results:
    assert r.stats.draft_tokens >= 2 and r.stats.accepted_tokens == r.stats.draft_tokens


def test_the_adaptive_policy_follows_the_round_costs_as_served(target, expected, monkeypatch):
  """Warmup said a round costs a step at any K; served, a drafting round takes 10 times an autoregressive one (a
  clock that says so): the policy times an autoregressive step first, drafts once at K=1, then stops drafting.
  With the warmup's costs alone it would draft to the end."""
  from specjax.serving import programs
  clock, step_program = [0.0], programs.step_program

  def timed_step(*args, k=None, **kwargs):
    out = step_program(*args, k=k, **kwargs)
    clock[0] += int(out.round) * (0.001 if k == 0 else 0.010)
    return out

  monkeypatch.setattr(programs, "step_program", timed_step)
  for served_costs in (True, False):
    engine = Engine(target, drafter=drafters.DraftModel(target), k="auto", slots=1, rounds_per_step=2,
                    max_model_len=64, round_costs={1: (1.0, 1.0, 1.0, 1.0)}, served_costs=served_costs,
                    pipeline=False)   # the clock moves when a step is dispatched: each is taken before the next
    engine._slots.clock = lambda: clock[0]
    handle = engine.submit(Request(*REQUESTS[1], GREEDY))
    _run_until_finished(engine, [handle])
    result = handle.result(timeout=0)
    assert result.token_ids == expected[1]
    if served_costs:
      assert result.stats.draft_tokens == 1 * 2    # one step of 2 rounds at K=1 (the first drafting starts small)
      assert engine.served_round_ms == {1: {0: 1.0, 1: 10.0}}
    else:                                          # K=1 first, then K=4 to the end
      assert result.stats.draft_tokens > 4 * 2 * 2


def test_a_drafting_k_the_warmup_misjudged_is_served_once_and_then_kept(target, expected, monkeypatch):
  """Warmup costs say K=4 is dear (5 steps) and K=2 cheap; as served (a clock that says so) a K=4 round costs 2.5
  autoregressive ones and pays best. Scaling the unserved K=4 by how far K=2 was off would keep K=2 for good: once
  the policy drafts at one K twice in a row, it serves each unserved K a step, and then keeps K=4."""
  from specjax.serving import programs
  clock, step_program = [0.0], programs.step_program
  ms_per_round = {0: 1.0, 1: 1.5, 2: 2.0, 4: 2.5}

  def timed_step(*args, k=None, **kwargs):
    out = step_program(*args, k=k, **kwargs)
    clock[0] += int(out.round) * ms_per_round[k] / 1e3
    return out

  monkeypatch.setattr(programs, "step_program", timed_step)
  engine = Engine(target, drafter=drafters.DraftModel(target), k="auto", slots=1, rounds_per_step=2,
                  max_model_len=64, round_costs={1: (1.0, 1.5, 1.6, 5.0)}, pipeline=False)   # the clock: each step
  engine._slots.clock = lambda: clock[0]                                                    # read before the next
  handle = engine.submit(Request(*REQUESTS[1], GREEDY))
  _run_until_finished(engine, [handle])
  assert handle.result(timeout=0).token_ids == expected[1]
  assert engine.served_round_ms[1] == {0: 1.0, 1: 1.5, 2: 2.0, 4: 2.5}
  assert len(engine._slots.served._ms[(1, 4)]) >= 2   # K=4 kept after the step that measured it


def test_the_adaptive_policy_measures_each_buckets_costs(target):
  engine = Engine(target, drafter=drafters.PromptLookup(max_ngram=3), k="auto", slots=2, rounds_per_step=2,
                  max_model_len=64)
  engine.warmup()
  costs = engine.round_costs
  assert sorted(costs) == [1, 2]
  for branch_costs in costs.values():
    assert len(branch_costs) == 4 and branch_costs[0] == 1.0 and all(0 < c < 50 for c in branch_costs)


def test_a_second_sampling_setting_takes_the_measured_costs_and_compiles_at_warmup(target, monkeypatch):
  """The costs are measured once per bucket, for the first sampling setting; a second one warmed takes them and
  still has every K's step compiled at warmup; one never warmed takes them too instead of stalling the engine to
  measure (and compile every K) while serving."""
  from specjax.serving import calibration, programs
  measured, measure = [], calibration.measure
  monkeypatch.setattr(calibration, "measure", lambda slots, spec, bucket: measured.append(bucket) or measure(
      slots, spec, bucket))
  engine = Engine(target, drafter=drafters.PromptLookup(max_ngram=3), k="auto", slots=2, rounds_per_step=2,
                  max_model_len=48)   # shapes of this test alone
  engine.warmup(samplings=(GREEDY, specjax.SamplingParams(1.0)), prompt_lengths=(5,))
  assert measured == [1, 2]
  compiled = programs.step_program._cache_size()
  burst = [engine.submit(Request(REQUESTS[i][0], 5, specjax.SamplingParams(1.0), seed=i)) for i in (0, 1)]
  _run_until_finished(engine, burst)
  assert programs.step_program._cache_size() == compiled
  late = engine.submit(Request(REQUESTS[3][0], 4, specjax.SamplingParams(0.7)))
  _run_until_finished(engine, [late])
  assert measured == [1, 2] and late.result(timeout=0).stats.completion_tokens == 4


def test_engine_thread_serves_and_stops(target, expected):
  engine = Engine(target, drafter=drafters.PromptLookup(), k=3, slots=2, rounds_per_step=2, max_model_len=64).start()
  try:
    results = [engine.submit(Request(p, n, GREEDY)) for p, n in REQUESTS[:3]]
    for i, handle in enumerate(results):
      assert handle.result(timeout=120).token_ids == expected[i]
    long = engine.submit(Request([1, 2], 60, GREEDY))
  finally:
    engine.stop()
  assert not engine.alive
  assert long.result(timeout=10).finish_reason in ("cancelled", "length")
  assert engine.free_slots() == 2 and engine.num_waiting == 0


def test_the_engine_imports_no_http_stack():
  code = "import sys, specjax.serving; assert not {'starlette', 'uvicorn'} & set(sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert out.returncode == 0, out.stderr[-2000:]
