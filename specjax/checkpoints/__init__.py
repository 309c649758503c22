"""Checkpoint formats (GGUF, Hugging Face safetensors, specjax Orbax); all produce the same parameter tree."""

from specjax.checkpoints.load import load_model
from specjax.checkpoints.orbax_io import save_model
