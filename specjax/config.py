"""Static model configuration: a frozen, hashable dataclass usable as a jit-static argument."""

import dataclasses

SUPPORTED_DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Shape of a decoder of model family `family` (specjax/models/: "llama" covers Llama, Mistral, Qwen2, SmolLM)."""

  vocab_size: int
  d_model: int
  n_layers: int
  n_heads: int
  n_kv_heads: int
  ffn_dim: int
  max_seq_len: int
  rope_theta: float = 10000.0
  norm_eps: float = 1e-5
  tie_embeddings: bool = True
  qkv_bias: bool = False
  dtype: str = "float32"
  head_dim: int = 0  # 0 means d_model // n_heads
  # Llama-3 style RoPE frequency scaling as a hashable tuple:
  # (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings); empty = off.
  rope_scaling: tuple = ()
  eos_token_ids: tuple = ()
  bos_token_id: int = -1
  family: str = "llama"

  def __post_init__(self):
    _family(self.family)  # unknown names raise, naming the known families
    for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "max_seq_len"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
    if self.n_heads % self.n_kv_heads:
      raise ValueError(f"ModelConfig.n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}")
    if not self.head_dim and self.d_model % self.n_heads:
      raise ValueError(f"ModelConfig.d_model={self.d_model} is not divisible by n_heads={self.n_heads}; set head_dim")
    if self.head_dim_ % 2:
      raise ValueError(f"head dimension must be even for RoPE, got {self.head_dim_}")
    if self.dtype not in SUPPORTED_DTYPES:
      raise ValueError(f"ModelConfig.dtype must be one of {SUPPORTED_DTYPES}, got {self.dtype!r}")
    if self.rope_scaling and len(self.rope_scaling) != 4:
      raise ValueError("ModelConfig.rope_scaling must be () or (factor, low_freq_factor, high_freq_factor, original_max_len)")
    object.__setattr__(self, "eos_token_ids", tuple(int(t) for t in self.eos_token_ids))
    for t in self.eos_token_ids:
      if not 0 <= t < self.vocab_size:
        raise ValueError(f"eos token id {t} is outside the vocabulary of size {self.vocab_size}")

  @property
  def head_dim_(self) -> int:
    """The per-head width actually used."""
    return self.head_dim or self.d_model // self.n_heads

  def replace(self, **changes) -> "ModelConfig":
    return dataclasses.replace(self, **changes)

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, values: dict) -> "ModelConfig":
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - known
    if unknown:
      raise ValueError(f"unknown ModelConfig fields: {sorted(unknown)}")
    values = dict(values)
    for name in ("rope_scaling", "eos_token_ids"):
      if name in values:
        values[name] = tuple(values[name])
    return cls(**values)

  def param_count(self) -> int:
    return _family(self.family).count_params(self)


def _family(name: str):
  from specjax.models import get_family  # imported here: the family modules import this one
  return get_family(name)
