"""Hand-written kernels for the places where XLA leaves speed on the table (CPU skinny matmuls and
few-query cache attention)."""

from specjax.kernels.linear import kernels_enabled, use_kernels
from specjax.kernels.packed import PackedKernel, dense, dense_group, packed_params, plain
