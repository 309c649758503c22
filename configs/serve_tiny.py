"""A tiny random model behind the server (no tokenizer: prompts are token-id lists); tests and smoke runs."""

from configs import serve_smollm2


def get_config():
  config = serve_smollm2.get_config()
  config.model = "random:tiny"
  config.served_model_name = "tiny"
  config.slots = 2
  config.max_model_len = 256
  config.drafter = "prompt_lookup"
  config.draft_model = ""
  config.k = 3
  config.warmup_temperatures = (0.0,)
  config.shutdown_timeout_s = 5
  config.log_level = "warning"
  return config
