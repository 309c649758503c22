"""specjax: speculative decoding of large language models in JAX / Flax NNX."""

from specjax.config import ModelConfig
from specjax.model import Model, init_model
