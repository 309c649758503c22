"""Phase-split mode: each phase program compiles once (in the warmup), so no timed round includes compilation."""

import jax

import specjax
from specjax import drafters
from specjax.benchmark import phases
from specjax.host import prepare
from specjax.sampling import SamplingParams


def _compiled_programs():
  return {name: getattr(phases, name)._cache_size() for name in ("_draft", "_verify", "_accept")}


def test_rounds_reuse_the_warmup_programs_when_drafter_weights_are_committed():
  config = specjax.ModelConfig(vocab_size=96, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64,
                               max_seq_len=128)
  target = specjax.init_model(config, seed=0)
  draft_model = specjax.init_model(config.replace(n_layers=1, d_model=24), seed=1)
  # Weights placed on a device explicitly (as Orbax and load_drafter do) make every _accept output committed.
  draft_model = draft_model.with_params(jax.device_put(draft_model.params, jax.devices()[0]))
  drafter = drafters.DraftModel(draft_model)
  batch = prepare(target, [[5, 6, 7, 5, 6, 7, 5, 6]], max_new_tokens=12, sampling=SamplingParams(temperature=1.0),
                  drafter=drafter, k=2, stop_at_eos=False, min_cache_size=64)
  before = _compiled_programs()
  state, timings = phases.run_phase_split(target, batch, jax.random.key(0))
  assert len(timings) >= 3
  after = _compiled_programs()
  assert {name: after[name] - before[name] for name in after} == {"_draft": 1, "_verify": 1, "_accept": 1}
