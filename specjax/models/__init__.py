"""Decoder models."""

from specjax.models.llama import Llama
