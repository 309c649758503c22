"""Phase-split mode: each phase program compiles once (in the warmup), so no timed round includes compilation."""

import jax
import jax.numpy as jnp

import specjax
from specjax import drafters
from specjax.benchmark import phases
from specjax.generate import pack_batch
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
  tokens_BxS, prompt_len_B, max_new_B = pack_batch([[5, 6, 7, 5, 6, 7, 5, 6]], 64, 12)
  before = _compiled_programs()
  state, timings = phases.run_phase_split(target, drafter, jnp.asarray(tokens_BxS), jnp.asarray(prompt_len_B),
                                          jnp.asarray(max_new_B), jax.random.key(0), k=2,
                                          sampling=SamplingParams(temperature=1.0), eos_ids=(), prompt_bucket=16)
  assert len(timings) >= 3
  after = _compiled_programs()
  assert {name: after[name] - before[name] for name in after} == {"_draft": 1, "_verify": 1, "_accept": 1}
