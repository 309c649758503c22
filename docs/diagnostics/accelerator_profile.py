"""Where the Llama-3-8B-shaped target's call goes on an accelerator (docs/results.md section 33): the device's
kernels of 20 scoring calls over 1 and over 2 positions (2048 cached positions, batch 1, random bfloat16 weights),
summed by kernel name from the profiler's trace, the largest first.

  python docs/diagnostics/accelerator_profile.py --out=results/accelerator_profile
"""
import argparse
import collections
import glob
import gzip
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from configs.llama3_8b_1b import TARGET  # noqa: E402
from specjax.cache import init_cache  # noqa: E402
from specjax.config import ModelConfig  # noqa: E402
from specjax.engine import params_for, score_program  # noqa: E402
from specjax.model import init_model  # noqa: E402
from specjax.spec import TargetSpec  # noqa: E402


def kernel_table(trace_dir: str, calls: int, top: int) -> list[str]:
  """Per kernel name on the device's streams: total microseconds per call and launches per call."""
  paths = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True) + glob.glob(
      os.path.join(trace_dir, "**", "perfetto_trace.json.gz"), recursive=True)
  if not paths:
    return [f"no trace file under {trace_dir}: {sorted(glob.glob(os.path.join(trace_dir, '**'), recursive=True))}"]
  with gzip.open(paths[0]) as f:
    events = json.load(f)
  events = events["traceEvents"] if isinstance(events, dict) else events
  names = {e["pid"]: e["args"].get("name", "") for e in events
           if e.get("ph") == "M" and e.get("name") == "process_name"}
  device = {pid for pid, name in names.items() if "GPU" in name or "TPU" in name or "device" in name.lower()}
  total, count = collections.Counter(), collections.Counter()
  for e in events:
    if e.get("ph") == "X" and e.get("pid") in device and "dur" in e:
      total[e["name"]] += float(e["dur"])
      count[e["name"]] += 1
  if not total:
    return [f"no device kernels; processes: {sorted(names.values())}"]
  lines = [f"device processes: {sorted(names[p] for p in device)}; {sum(total.values()) / calls:.0f} us a call in "
           f"{sum(count.values()) / calls:.0f} kernels"]
  for name, us in total.most_common(top):
    lines.append(f"  {us / calls:8.1f} us  x{count[name] / calls:5.1f}  {name[:110]}")
  return lines


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--out", default="results/accelerator_profile")
  parser.add_argument("--calls", type=int, default=20)
  parser.add_argument("--top", type=int, default=25)
  parser.add_argument("--tiny", action="store_true", help="a 2-layer model: checks the script on any machine")
  args = parser.parse_args()
  config = ModelConfig.from_dict(TARGET)
  if args.tiny:
    config = config.replace(vocab_size=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128,
                            eos_token_ids=(), bos_token_id=-1)
  model = init_model(config)
  spec = TargetSpec(graphdef=model.graphdef, kernels=False)
  params = params_for(model, spec)
  for t_len in (1, 2):
    tokens = jnp.ones((1, t_len), jnp.int32)
    positions = 2048 + jnp.arange(t_len, dtype=jnp.int32)[None]
    cache = init_cache(config, 1, 4096).with_lengths(jnp.full((1,), 2048, jnp.int32))
    for _ in range(3):
      logits, cache = score_program(params, tokens, positions, cache, None, spec=spec)
    jax.block_until_ready(logits)
    trace_dir = os.path.join(args.out, f"t{t_len}")
    start = time.perf_counter()
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
      for _ in range(args.calls):
        logits, cache = score_program(params, tokens, positions, cache, None, spec=spec)
      jax.block_until_ready(logits)
    print(f"T={t_len}: {1e3 * (time.perf_counter() - start) / args.calls:.2f} ms a call while traced", flush=True)
    print("\n".join(kernel_table(trace_dir, args.calls, args.top)), flush=True)


if __name__ == "__main__":
  main()
