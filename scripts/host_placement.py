"""The autoregressive step beside where the host placed the CPUs, over time: on a VM the host moves the vCPUs
between one die and two every 10-60 s, and the step moves with them (docs/results.md section 54). Run it before
timing anything to see which placement the machine is in, and how far apart the two are today.

  python scripts/host_placement.py --seconds=100 --output=results/host_placement.json
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags, logging  # noqa: E402
import numpy as np  # noqa: E402

import specjax  # noqa: E402
from specjax.benchmark import placement  # noqa: E402
from specjax.cli import model_from_source  # noqa: E402
from specjax.training.files import write_json  # noqa: E402

_MODEL = flags.DEFINE_string("model", "smollm2-135m", "the target (a known model name, a checkpoint or random:NAME)")
_SECONDS = flags.DEFINE_float("seconds", 60.0, "how long to sample")
_TOKENS = flags.DEFINE_integer("max_new_tokens", 128, "tokens per timed call")
_OUTPUT = flags.DEFINE_string("output", "", "also write the samples and the summary here as JSON")


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  specjax.enable_compilation_cache()
  target = model_from_source(_MODEL.value)
  prompt = "Write a short story about a cat who learns to swim." if target.tokenizer is not None else [1, 2, 3]

  def step_ms() -> float:
    stats = specjax.generate(target, [prompt], max_new_tokens=_TOKENS.value, seed=0, stop_at_eos=False).stats
    return 1e3 * (stats.wall_time_s - stats.first_token_s) / max(_TOKENS.value - 1, 1)

  step_ms()  # compiles
  samples, start = [], time.time()
  while time.time() - start < _SECONDS.value:
    round_trip = placement.core_round_trip_us()
    samples.append({"t_s": time.time() - start, "round_trip_us": round_trip, "ar_ms_per_token": step_ms()})
    print(f"{samples[-1]['t_s']:6.1f} s  round trip {round_trip if round_trip is not None else float('nan'):.3f} us "
          f"({placement.placement(round_trip) or 'not measured'})  autoregressive {samples[-1]['ar_ms_per_token']:.2f} "
          f"ms/token", flush=True)
  summary = {}
  for where in sorted({placement.placement(s["round_trip_us"]) for s in samples}):
    steps = [s["ar_ms_per_token"] for s in samples if placement.placement(s["round_trip_us"]) == where]
    summary[where or "not measured"] = {"samples": len(steps), "ar_ms_per_token_median": float(np.median(steps))}
    print(f"{where or 'not measured'}: {len(steps)} samples, autoregressive step median {np.median(steps):.2f} ms")
  if _OUTPUT.value:
    os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
    write_json(_OUTPUT.value, {"model": _MODEL.value, "samples": samples, "summary": summary})


if __name__ == "__main__":
  app.run(main)
