"""Ahead-of-time compilation for a TPU topology from a CPU host, and the roofline prediction built on it.

`libtpu` (the `tpu` extra) compiles for a named topology (e.g. "v4:2x2x4") without TPU hardware; the compiled
programs give real per-device memory, FLOP and byte counts. Parameters stay abstract (ShapeDtypeStructs).
"""
