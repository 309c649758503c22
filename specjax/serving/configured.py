"""A serving engine from a serve config (`configs/serve_smollm2.py`): the model, the drafter, K or the adaptive
policy, slots and bounds, as `scripts/serve.py` and the tests build it."""

from specjax.serving.engine import Engine


def build_engine(config) -> tuple[Engine, str, str]:
  """(engine, served model name, drafter name; "" = autoregressive) from a serve config."""
  from specjax.cli import drafter_from_config, model_from_source
  target = model_from_source(config.model, config.get("dtype", ""))
  method = config.drafter or ""
  drafter = drafter_from_config(method, target, config.get("draft_model", "")) if method else None
  k = ("auto" if config.get("adaptive", False) else config.k) if drafter is not None else None
  engine = Engine(target, drafter=drafter, k=k, slots=config.slots,
                  rounds_per_step=config.rounds_per_step, max_queue=config.max_queue,
                  max_model_len=config.max_model_len or None, seed=config.get("seed", 0),
                  max_sampling_settings=config.get("max_sampling_settings", 8))
  return engine, config.get("served_model_name", "") or config.model, method
