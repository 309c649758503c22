"""Per-chip peak figures for the roofline, each with its source (Google Cloud TPU system-architecture pages).

A JAX device is one chip: v4 and v5p run in megacore mode (the chip's two TensorCores as one device), v5e and
v6e have one TensorCore per chip. Collective bandwidth per chip is the pod's all-reduce bandwidth divided by its
chips where the page gives that, else the per-chip bidirectional ICI bandwidth.
"""

import dataclasses

GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class ChipSpec:
  """Peak figures of one TPU chip (one JAX device)."""

  name: str
  peak_flops: float          # bf16 FLOP/s
  hbm_bytes: int
  hbm_bandwidth: float       # bytes/s
  collective_bandwidth: float  # bytes/s per chip for an all-reduce
  source: str

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


CHIPS = {
    "v4": ChipSpec("TPU v4", 275e12, 32 * GIB, 1200e9, 1.1e15 / 4096,
                   "https://cloud.google.com/tpu/docs/v4: peak 275 TFLOP/s per chip (bf16), HBM2 32 GiB at 1200 GBps; "
                   "all-reduce bandwidth 1.1 PB/s per 4096-chip pod"),
    "v5e": ChipSpec("TPU v5e", 197e12, 16 * 10**9, 819e9, 51.2e12 / 256,
                    "https://cloud.google.com/tpu/docs/v5e: peak 197 TFLOP/s per chip (bf16), HBM2 16 GB at 819 GBps; "
                    "all-reduce bandwidth 51.2 TB/s per 256-chip pod"),
    "v5p": ChipSpec("TPU v5p", 459e12, 95 * GIB, 2765e9, 1200e9,
                    "https://cloud.google.com/tpu/docs/v5p: peak 459 TFLOP/s per chip (bf16), HBM 95 GiB at 2765 GBps; "
                    "bidirectional ICI 1200 GBps per chip"),
    "v6e": ChipSpec("TPU v6e", 918e12, 32 * 10**9, 1638e9, 102.4e12 / 256,
                    "https://cloud.google.com/tpu/docs/v6e: peak 918 TFLOP/s per chip (bf16), HBM 32 GB at 1638 GBps; "
                    "all-reduce bandwidth 102.4 TB/s per 256-chip pod"),
}


def chip_spec(generation: str) -> ChipSpec:
  if generation not in CHIPS:
    raise ValueError(f"no peak figures for TPU {generation!r}; known generations: {sorted(CHIPS)}")
  return CHIPS[generation]
