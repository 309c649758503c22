"""Load benchmark of an OpenAI-compatible server, with `vllm bench serve`'s flags and result keys.

  python scripts/serve.py --config=configs/serve_smollm2.py &
  python scripts/bench_serve.py --base-url http://127.0.0.1:8000 --num-prompts 40 --max-concurrency 4 \
      --request-rate 2 --goodput ttft:1000 tpot:100 --save-result --result-dir results/bench_serve

Prompts come from specjax's benchmark suite (--categories, --prompts-per-category), each category with its own output
length (--output-len overrides). Works against any OpenAI-compatible server (specjax, vLLM, llama.cpp's
llama-server). Prints vLLM's summary table; --save-result writes the result JSON (vLLM's keys plus specjax's
per-request `spec_decode`). Dashes or underscores in flag names, as you like.
"""

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

from specjax.benchmark import tasks  # noqa: E402
from specjax.benchmark.serving import cli, runner  # noqa: E402
from specjax.benchmark.serving.metrics import METRICS, parse_goodput  # noqa: E402
from specjax.benchmark.serving.summary import format_summary  # noqa: E402

_D = runner.BenchConfig()
flags.DEFINE_string("base_url", _D.base_url, "the server's base URL")
flags.DEFINE_string("endpoint", _D.endpoint, "API endpoint: /v1/completions or /v1/chat/completions")
flags.DEFINE_string("model", _D.model, "the model name to send (default: the first one /v1/models lists)")
flags.DEFINE_string("label", _D.label, "the run's label (prefix of the result file name)")
flags.DEFINE_integer("num_prompts", _D.num_prompts, "requests to send (0: each selected prompt once)")
flags.DEFINE_float("request_rate", _D.request_rate, "requests per second (inf: all at once)")
flags.DEFINE_float("burstiness", _D.burstiness, "gamma shape of the arrival gaps (1: Poisson; <1 burstier)")
flags.DEFINE_integer("max_concurrency", None, "requests in flight at most (default: no limit)")
flags.DEFINE_integer("seed", _D.seed, "seed of the prompt order, arrivals and sampled requests")
flags.DEFINE_list("goodput", [], "SLOs KEY:MS (ttft, tpot, e2el): `--goodput ttft:500 tpot:50`")
flags.DEFINE_bool("save_result", False, "write the result JSON")
flags.DEFINE_string("result_dir", "", "directory of the result JSON (default: the current one)")
flags.DEFINE_string("result_filename", "", "file name of the result JSON (default: vLLM's pattern)")
flags.DEFINE_list("percentile_metrics", list(_D.percentile_metrics), f"metrics with percentiles: {','.join(METRICS)}")
flags.DEFINE_list("metric_percentiles", ["99"], "percentiles to report, e.g. 50,90,99")
flags.DEFINE_list("categories", list(tasks.CATEGORIES), "prompt categories of the suite")
flags.DEFINE_integer("prompts_per_category", _D.prompts_per_category, "first N prompts of each category (0: all)")
flags.DEFINE_integer("output_len", _D.output_len, "tokens to ask for (0: each category's own length)")
flags.DEFINE_bool("ignore_eos", False, "generate exactly the asked tokens (vLLM's ignore_eos)")
flags.DEFINE_float("temperature", _D.temperature, "sampling temperature (0: greedy)")
flags.DEFINE_string("api_key", "", f"sent as 'Authorization: Bearer KEY' (default: ${runner.API_KEY_ENV})")
flags.DEFINE_float("timeout_s", _D.timeout_s, "one request's time limit (seconds)")
flags.DEFINE_float("max_duration_s", _D.max_duration_s, "the whole run's time limit (seconds)")
flags.DEFINE_integer("num_warmups", _D.num_warmups, "untimed requests before the run")
flags.DEFINE_integer("token_id_vocab", _D.token_id_vocab, "send token-id prompts in [1, N) (servers without a "
                     "tokenizer, e.g. configs/serve_tiny.py); 0: text")
flags.DEFINE_integer("max_prompt_tokens", _D.max_prompt_tokens, "cut token-id prompts to this length (0: uncut)")
FLAGS = flags.FLAGS


def main(argv):
  del argv
  logging.getLogger("httpx").setLevel(logging.WARNING)   # not a line per request
  percentiles = tuple(float(p) for p in FLAGS.metric_percentiles)
  config = runner.BenchConfig(
      base_url=FLAGS.base_url, endpoint=FLAGS.endpoint, model=FLAGS.model, label=FLAGS.label,
      num_prompts=FLAGS.num_prompts, request_rate=FLAGS.request_rate, burstiness=FLAGS.burstiness,
      max_concurrency=FLAGS.max_concurrency or 0, seed=FLAGS.seed, goodput=parse_goodput(FLAGS.goodput),
      percentile_metrics=tuple(FLAGS.percentile_metrics), metric_percentiles=percentiles,
      categories=tuple(FLAGS.categories), prompts_per_category=FLAGS.prompts_per_category,
      output_len=FLAGS.output_len, ignore_eos=FLAGS.ignore_eos, temperature=FLAGS.temperature,
      api_key=FLAGS.api_key, timeout_s=FLAGS.timeout_s, max_duration_s=FLAGS.max_duration_s,
      num_warmups=FLAGS.num_warmups, token_id_vocab=FLAGS.token_id_vocab, max_prompt_tokens=FLAGS.max_prompt_tokens)
  result = runner.run(config)
  print(format_summary(result, percentiles))
  if FLAGS.save_result:
    path = runner.save(result, runner.result_path(config, result, FLAGS.result_dir, FLAGS.result_filename))
    print(f"wrote {path}")


def _parse(argv):
  return FLAGS(cli.normalize_argv(argv))


if __name__ == "__main__":
  app.run(main, flags_parser=_parse)
