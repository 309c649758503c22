"""specjax: speculative decoding of large language models in JAX / Flax NNX."""

from specjax.calibration import Calibration
from specjax.checkpoints import load_model, save_model
from specjax.compilation_cache import enable_compilation_cache
from specjax.config import ModelConfig
from specjax.generate import GenerationResult, generate
from specjax.model import Model, init_model
from specjax.policy import SpeculationPolicy
from specjax.sampling import SamplingParams
from specjax.spec import DecodeSpec
from specjax.stats import GenerationStats
from specjax.trees import DynamicTree, StaticTree
from specjax import drafters
from specjax.drafters import truncated_model
