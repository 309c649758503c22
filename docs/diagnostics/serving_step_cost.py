"""The serving step's cost per round against the rows it computes: autoregressive and K=4 (q4 self-draft) on
SmolLM2-135M at max_model_len 2048, 1 / 4 / 16 active rows (what `specjax.serving.calibration` measures for the
adaptive policy, printed as milliseconds).

  python docs/diagnostics/serving_step_cost.py
"""

import specjax
from specjax.cli import drafter_from_config, model_from_source
from specjax.serving import Engine, Request, calibration

ROUNDS = 4


def main():
  specjax.enable_compilation_cache()
  target = model_from_source("smollm2-135m", "")
  engine = Engine(target, drafter=drafter_from_config("quantized", target, "q4"), k="auto", slots=16,
                  rounds_per_step=ROUNDS, max_model_len=2048)
  engine.warmup(all_buckets=False)
  spec = engine._specs[Request([1], 1, specjax.SamplingParams(0.0)).group]
  for rows in (1, 4, 16):
    ms = calibration.step_ms(engine._slots, spec, rows)
    print(f"{rows:2d} rows: " + ", ".join(f"K={k} {t:.1f} ms" for k, t in zip(spec.k.branch_ks, ms)) +
          f" per round ({1e3 * rows / ms[0]:.0f} tokens/s autoregressive)", flush=True)


if __name__ == "__main__":
  main()
