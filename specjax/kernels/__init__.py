"""Hand-written kernels for the places where XLA leaves speed on the table (CPU skinny matmuls)."""

from specjax.kernels.linear import dense, kernels_enabled, use_kernels
