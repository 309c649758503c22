"""The serving sweep's settings (configs/bench_serve_sweep.py) checked before any server starts, its systems (a
specjax serve config with overrides, or llama-server with a draft length), which of them speculate and against
what, and its cells (one per concurrency, one per request rate)."""

import importlib.util
import math
import os

from specjax.benchmark import tasks
from specjax.benchmark.serving.metrics import parse_goodput

KEYS = ("output_dir", "systems", "serve_config", "specjax", "llama_server", "baseline", "slots", "concurrencies",
        "request_rates", "min_prompts", "prompts_per_slot", "categories", "prompts_per_category", "output_len",
        "ignore_eos", "endpoint", "temperature", "goodput", "seed", "token_id_vocab", "max_prompt_tokens",
        "warmup_output_len", "warmup_prompt_lengths", "timeout_s", "max_cell_s", "startup_timeout_s",
        "stop_timeout_s", "llama_cpp_dir", "llama_cpp_threads", "llama_ctx_per_slot", "interleave", "repeats")
SWEEP_OWNED = ("host", "port")   # set by the sweep for every specjax server
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def resolve(path: str) -> str:
  """A relative path from the current directory, else from the repository root (the configs' paths are)."""
  path = os.path.expanduser(path)
  if os.path.isabs(path) or os.path.exists(path) or not os.path.exists(os.path.join(ROOT, path)):
    return path
  return os.path.join(ROOT, path)


def load_serve_config(path: str):
  """The ConfigDict of a serve config file (its get_config())."""
  if not os.path.isfile(path):
    raise ValueError(f"config.serve_config: no file {path!r}")
  spec = importlib.util.spec_from_file_location(f"_serve_config_{abs(hash(path))}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def _ints(name, values, low) -> tuple:
  values = tuple(values)
  if any(isinstance(v, bool) or not isinstance(v, int) or v < low for v in values):
    raise ValueError(f"config.{name} must be integers >= {low}, got {list(values)}")
  if len(set(values)) != len(values):
    raise ValueError(f"config.{name} has repeats: {list(values)}")
  return values


def _check_systems(c: dict, serve) -> None:
  both = set(c["specjax"]) & set(c["llama_server"])
  if both:
    raise ValueError(f"systems {sorted(both)} are both in config.specjax and config.llama_server")
  known = set(c["specjax"]) | set(c["llama_server"])
  unknown = [name for name in c["systems"] if name not in known]
  if unknown:
    raise ValueError(f"config.systems {unknown} are not systems of config.specjax or config.llama_server "
                     f"({sorted(known)})")
  if not c["systems"] or len(set(c["systems"])) != len(c["systems"]):
    raise ValueError(f"config.systems must name one or more distinct systems, got {list(c['systems'])}")
  for name, overrides in c["specjax"].items():
    bad = [key for key in overrides if key not in serve or key in SWEEP_OWNED]
    if bad:
      raise ValueError(f"config.specjax[{name!r}] overrides {bad}: not keys of {c['serve_config']} (or set by the "
                       f"sweep: {', '.join(SWEEP_OWNED)})")
  for name, draft in c["llama_server"].items():
    if isinstance(draft, bool) or not isinstance(draft, int) or draft < 0:
      raise ValueError(f"config.llama_server[{name!r}] is its draft tokens per round, an integer >= 0, got {draft!r}")
  if c["baseline"] and c["baseline"] not in known:
    raise ValueError(f"config.baseline {c['baseline']!r} is not a system ({sorted(known)}); '' for none")


def validate(config) -> dict:
  """A plain dict of the checked settings (ValueError naming the first bad one); `serve` holds the base config."""
  c = dict(config.to_dict() if hasattr(config, "to_dict") else config)
  missing = [key for key in KEYS if key not in c]
  if missing:
    raise ValueError(f"config is missing {missing}: start from configs/bench_serve_sweep.py, which sets every key")
  c["systems"] = tuple(c["systems"])
  c["specjax"] = {name: dict(overrides) for name, overrides in dict(c["specjax"]).items()}
  c["llama_server"] = dict(c["llama_server"])
  c["serve_config"], c["llama_cpp_dir"] = resolve(c["serve_config"]), resolve(c["llama_cpp_dir"])
  serve = load_serve_config(c["serve_config"])
  _check_systems(c, serve)
  c["serve"] = serve.to_dict()
  c["concurrencies"] = tuple(sorted(_ints("concurrencies", c["concurrencies"], 1)))
  rates = tuple(float(r) for r in c["request_rates"])
  if any(not r > 0 for r in rates) or len(set(rates)) != len(rates):
    raise ValueError(f"config.request_rates must be distinct rates > 0 (req/s), got {list(rates)}")
  c["request_rates"] = rates
  if not c["concurrencies"] and not rates:
    raise ValueError("no cells: give config.concurrencies or config.request_rates")
  if not isinstance(c["interleave"], bool):
    raise ValueError(f"config.interleave must be True or False, got {c['interleave']!r}")
  for name, low in (("repeats", 1), ("slots", 0), ("min_prompts", 1), ("prompts_per_slot", 0),
                    ("prompts_per_category", 0), ("output_len", 0), ("seed", 0), ("token_id_vocab", 0),
                    ("max_prompt_tokens", 0), ("warmup_output_len", 0), ("llama_cpp_threads", 1),
                    ("llama_ctx_per_slot", 0)):
    _ints(name, (c[name],), low)
  c["warmup_prompt_lengths"] = _ints("warmup_prompt_lengths", c["warmup_prompt_lengths"], 1)
  if c["slots"] and c["concurrencies"] and c["slots"] < max(c["concurrencies"]):
    raise ValueError(f"config.slots {c['slots']} < the largest concurrency {max(c['concurrencies'])}: "
                     f"requests would queue in the server instead of running together (0 = that concurrency)")
  categories = tuple(c["categories"])
  unknown = [x for x in categories if x not in tasks.CATEGORIES]
  if unknown or not categories:
    raise ValueError(f"unknown or no categories {unknown or list(categories)}; known: {list(tasks.CATEGORIES)}")
  c["categories"] = categories
  if not (c["temperature"] >= 0 and math.isfinite(c["temperature"])):
    raise ValueError(f"config.temperature must be a finite number >= 0, got {c['temperature']}")
  for name in ("timeout_s", "max_cell_s", "startup_timeout_s", "stop_timeout_s"):
    if not c[name] > 0:
      raise ValueError(f"config.{name} must be > 0, got {c[name]}")
  if c["endpoint"] not in ("/v1/completions", "/v1/chat/completions"):
    raise ValueError(f"config.endpoint must be /v1/completions or /v1/chat/completions, got {c['endpoint']!r}")
  if c["token_id_vocab"] and c["endpoint"] != "/v1/completions":
    raise ValueError("token-id prompts (config.token_id_vocab > 0) go to config.endpoint='/v1/completions'")
  c["goodput"] = tuple(c["goodput"])
  c["slos"] = parse_goodput(c["goodput"])
  return c


def slots(s: dict) -> int:
  """Server slots: config.slots, else the largest concurrency (1 when the sweep has rate cells only)."""
  return s["slots"] or max(s["concurrencies"] or (1,))


def cells(s: dict) -> list[dict]:
  """Each cell's concurrency (None: unlimited), request rate (inf: all at once) and number of requests."""
  count = lambda concurrency: max(s["min_prompts"], s["prompts_per_slot"] * concurrency)  # noqa: E731
  out = [{"concurrency": n, "request_rate": math.inf, "num_prompts": count(n)} for n in s["concurrencies"]]
  out += [{"concurrency": None, "request_rate": r, "num_prompts": count(slots(s))} for r in s["request_rates"]]
  return out


def speculates(s: dict, name: str) -> bool:
  """A llama-server system with a draft, or a specjax one whose (overridden) drafter is not ""."""
  if name in s["llama_server"]:
    return s["llama_server"][name] > 0
  return bool(s["specjax"][name].get("drafter", s["serve"].get("drafter", "")))


def adapts(s: dict, name: str) -> bool:
  """A specjax system under the adaptive policy (its override, else the serve config's)."""
  overrides = (s.get("specjax") or {}).get(name)
  return overrides is not None and bool(overrides.get("adaptive", (s.get("serve") or {}).get("adaptive", False)))


def baselines(s: dict, name: str) -> list[str]:
  """What a speculative system is measured against: config.baseline, and for llama-server with a draft also the
  first llama-server system of the sweep without one (its own implementation, autoregressive)."""
  if not speculates(s, name):
    return []
  found = [s["baseline"]] if s["baseline"] else []
  if name in s["llama_server"]:
    own = [n for n in s["systems"] if n in s["llama_server"] and not speculates(s, n)]
    found += own[:1]
  return [b for b in dict.fromkeys(found) if b != name]
