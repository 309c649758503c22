"""Decoder models, one module per family, each registered under its `ModelConfig.family` name."""

from specjax.models.family import (ModelFamily, ShardRule, get_family, known_families, register_family,
                                   unregister_family)
from specjax.models.llama import LLAMA, Llama

register_family(LLAMA)
