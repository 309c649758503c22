"""The serving sweep: specjax's server autoregressive, at fixed K=4 and under the adaptive policy (q4 self-draft of
SmolLM2-135M), and llama.cpp's llama-server on the same GGUF (f32 target) alone and with the Q4_1 file as its draft,
each loaded at every concurrency (and request rate); report.md says where each speculative system stops paying.

  bash scripts/build_llama_cpp.sh      # llama-server (without it those systems fail with the reason, the rest runs)
  python scripts/bench_serve_sweep.py --config=configs/bench_serve_sweep.py [--config.concurrencies='(1,4)'] \
      [--config.systems='("autoregressive","k4")'] [--config.request_rates='(0.5,1.0)']

Writes results.json (after every cell), report.md and *.png into output_dir; each server's log in output_dir/logs.
Every server is up at once (each on a free loopback port, stopped by SIGTERM at the end) and each cell is run by
all systems back to back, `repeats` times in rotated orders: the ratios are paired, not minutes of drift apart.
A server that would not fit in the memory left beside the others runs alone after they stop (unpaired; a 16-slot
specjax server holds 7-8 GiB, so on 24 GiB run at most two specjax systems per sweep to keep every ratio paired).
"""

import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.output_dir = "results/serve_sweep"
  c.systems = ("autoregressive", "k4", "adaptive", "llama-server", "llama-server+draft")  # run in this order
  c.serve_config = "configs/serve_smollm2.py"  # the specjax systems' base config (scripts/serve.py --config)
  # specjax systems: name -> overrides of serve_config (`--config.KEY=VALUE`); port and host are the sweep's
  c.specjax = ml_collections.ConfigDict({
      "autoregressive": {"drafter": ""},
      "k4": {"drafter": "quantized", "draft_model": "q4", "k": 4},
      "k6": {"drafter": "quantized", "draft_model": "q4", "k": 6},
      "k8": {"drafter": "quantized", "draft_model": "q4", "k": 8},
      "adaptive": {"drafter": "quantized", "draft_model": "q4", "adaptive": True},   # K per round, load-aware
  })
  # llama-server systems: name -> draft tokens per round (0: no draft; else -md the packaged Q4_1 file, fixed K)
  c.llama_server = ml_collections.ConfigDict({"llama-server": 0, "llama-server+draft": 4})
  c.baseline = "autoregressive"      # the system the throughput ratios divide by ("" = none)
  c.slots = 0                        # server slots (specjax `slots`, llama-server -np); 0 = the largest concurrency
  c.concurrencies = (1, 2, 4, 8, 16)   # a cell each: everything sent at once, at most N requests in flight
  c.request_rates = ()               # extra cells: Poisson arrivals at these rates (req/s), no concurrency limit
  c.interleave = True                # every server up at once, each cell run by all systems back to back (paired
                                     # ratios); False: one server at a time, all its cells, stopped before the next
  c.repeats = 2                      # each cell this many times (interleaved: the systems' order rotated each time)
  c.min_prompts = 8                  # requests per cell: max(min_prompts, prompts_per_slot * concurrency); a rate
  c.prompts_per_slot = 2             # cell takes the count of the largest concurrency
  c.categories = ("code", "prose", "structured", "long_context")
  c.prompts_per_category = 0         # the first N prompts of each category (0: all)
  c.output_len = 0                   # tokens asked per request (0: each category's own)
  c.ignore_eos = False               # ask for exactly those tokens
  c.endpoint = "/v1/chat/completions"  # the instruct model in its chat template (a raw completion of an instruct
                                       # prompt often ends at once); /v1/completions for token-id prompts
  c.temperature = 0.0
  c.goodput = ("ttft:2000", "tpot:100")  # SLOs (KEY:MS, as vllm bench serve's --goodput)
  c.seed = 0
  c.token_id_vocab = 0               # > 0: token-id prompts (servers without a tokenizer, configs/serve_tiny.py)
  c.max_prompt_tokens = 0            # token-id prompts cut to this length (0: uncut)
  c.warmup_output_len = 4            # an untimed pass (each prompt once, this many tokens) after each server starts;
                                     # 0 = none (specjax then compiles unseen prompt buckets inside the first cell)
  c.warmup_prompt_lengths = (33, 65, 129, 257, 513, 1025)  # specjax servers compile these prompt buckets (64 ...
                                     # 2048 tokens, the suite's 42-1552 in the chat template) at every admission
                                     # row count at startup, so no cell waits for a compilation
  c.timeout_s = 600.0                # one request's limit
  c.max_cell_s = 1800.0              # one cell's limit (requests left are counted as failed)
  c.startup_timeout_s = 1200.0       # a server's start (load, compile, warm up) until /health answers 200
  c.stop_timeout_s = 60.0            # after SIGTERM, how long a server may drain before it is killed
  c.llama_cpp_dir = "build/llama.cpp/cmake/bin"  # bash scripts/build_llama_cpp.sh builds it
  c.llama_cpp_threads = 2            # -t / -tb / -td of llama-server
  c.llama_ctx_per_slot = 0           # context per llama-server slot (-c = slots * this); 0 = serve max_model_len
  return c
