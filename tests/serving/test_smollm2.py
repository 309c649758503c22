"""The engine on the real SmolLM2-135M: two chat requests in flight together, one arriving mid-generation, each
exactly the offline greedy tokens of its prompt alone (prompt lookup at K=3)."""

import specjax
from specjax import drafters
from specjax.serving import Engine, Request

GREEDY = specjax.SamplingParams(temperature=0.0)
PROMPTS = ["Write a Python function that adds two numbers.", "List three colors."]


def test_smollm2_requests_in_flight_together_equal_offline_generate(smollm2_model):
  expected = [specjax.generate(smollm2_model, [p], max_new_tokens=16, sampling=GREEDY, chat=True).tokens[0]
              for p in PROMPTS]
  ids = [smollm2_model.tokenizer.apply_chat_template(p) for p in PROMPTS]
  engine = Engine(smollm2_model, drafter=drafters.PromptLookup(), k=3, slots=2, rounds_per_step=2,
                  max_model_len=96)
  first = engine.submit(Request(ids[0], 16, GREEDY))
  engine.step()
  second = engine.submit(Request(ids[1], 16, GREEDY))
  for _ in range(100):
    if first.finished and second.finished:
      break
    engine.step()
  assert [first.result(timeout=0).token_ids, second.result(timeout=0).token_ids] == expected
  assert engine.free_slots() == 2
