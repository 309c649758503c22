"""A tiny random Llama (no checkpoint needed): exercises every path of scripts/generate.py in seconds."""

from configs import smollm2_135m


def get_config():
  config = smollm2_135m.get_config()
  config.model = "random:tiny"
  config.prompts = ["1 2 3 4 5 1 2 3", "7 8 9"]  # token ids, space separated, for a model without tokenizer
  config.chat = False
  config.max_new_tokens = 32
  config.drafter = "draft_model"
  config.draft_model = "truncate:1"
  return config
