"""Serve the embedded SmolLM2-135M-Instruct over the OpenAI API (scripts/serve.py): 4 slots, the target's own int8
weights as its draft at K=4 (drafter "" serves autoregressively)."""

import ml_collections


def get_config():
  config = ml_collections.ConfigDict()
  config.model = "smollm2-135m"        # a .gguf file, a Hugging Face directory, a save_model directory, a name, random:NAME
  config.dtype = ""                    # "" keeps the checkpoint's dtype; "float32" or "bfloat16"
  config.served_model_name = ""        # the name clients send as `model` ("" = config.model)
  config.host = "127.0.0.1"            # loopback only; "0.0.0.0" to listen on every interface
  config.port = 8000
  config.api_key = ""                  # if set, every endpoint but /health needs `Authorization: Bearer <key>`;
                                       # "" = $SPECJAX_API_KEY if set (kept out of the process list), else none
  config.slots = 4                     # S: requests decoded together (the state holds the row bucket they need)
  config.rounds_per_step = 4           # R: speculative rounds per host step (tokens stream after each step)
  config.max_queue = 64                # requests that may wait for a slot; beyond, 429
  config.max_model_len = 2048          # longest prompt + completion of a request (0: what the model holds)
  config.drafter = "quantized"         # a registry name (specjax/drafters/registry.py) or "" for autoregressive
  config.draft_model = "int8"          # the drafter's source (as in configs/smollm2_135m.py)
  config.k = 4
  config.adaptive = False              # True: K = 'auto', the adaptive policy at the round costs of the rows being
                                       # served (measured per row bucket at warmup): speculation turns off as load grows
  config.seed = 0                      # requests without a seed draw from this one
  config.max_sampling_settings = 8     # distinct (temperature, top_k, top_p) settings compiled; beyond, 400
  config.warmup_temperatures = (0.0, 1.0)  # settings compiled before serving (OpenAI's default temperature is 1)
  config.warmup_prompt_lengths = (1,)      # prompt lengths whose buckets (16, 32, ... tokens) are compiled then
  config.warmup_admit_rows = (1, 2, 4, 8)  # requests prefilled together (each count its own program) compiled then
  config.warmup_all_buckets = True         # compile the step at every row bucket (1, 2, 4, ..., slots) before serving
  config.shutdown_timeout_s = 10       # on SIGTERM, in-flight requests get this long before they are cancelled
  config.log_level = "info"
  return config
