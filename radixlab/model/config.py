"""``ModelConfig``: the numbers that fix a Llama-architecture decoder, with Hugging Face's field names.

The names are those of ``transformers``' ``LlamaConfig`` (and of a model's ``config.json``), so a
student can read SmolLM2's or Llama's published config next to ours. Notebook 07_kv_memory_pool uses
``kv_bytes_per_token`` to say how many tokens fit in a GPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from numbers import Integral, Real
from typing import Any

import torch


@dataclass
class ModelConfig:
    """Shape and constants of a Llama-style decoder (RMSNorm, rotary, grouped-query attention, SwiGLU).

    ``num_key_value_heads`` defaults to ``num_attention_heads`` (plain multi-head attention) and
    ``head_dim`` to ``hidden_size // num_attention_heads``, as in ``LlamaConfig``.
    ``eos_token_id`` is ``None`` for a model without an end-of-sequence token (the tiny model).
    """

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    vocab_size: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "vocab_size", "max_position_embeddings"):
            _positive_int(getattr(self, name), name)
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        _positive_int(self.num_key_value_heads, "num_key_value_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                             f"num_key_value_heads ({self.num_key_value_heads}) for grouped-query attention")
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(f"hidden_size ({self.hidden_size}) is not divisible by num_attention_heads "
                                 f"({self.num_attention_heads}); give head_dim explicitly")
            self.head_dim = self.hidden_size // self.num_attention_heads
        _positive_int(self.head_dim, "head_dim")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even (rotary embeddings rotate pairs), got {self.head_dim}")
        for name in ("rope_theta", "rms_norm_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Real) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
            setattr(self, name, float(value))
        if not isinstance(self.tie_word_embeddings, bool):
            raise ValueError(f"tie_word_embeddings must be a bool, got {self.tie_word_embeddings!r}")
        for name in ("bos_token_id", "eos_token_id"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, Integral)
                                      or not 0 <= value < self.vocab_size):
                raise ValueError(f"{name} must be None or a token id in 0 .. {self.vocab_size - 1}, got {value!r}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        """From a Hugging Face ``config.json``-style dict; keys this model does not use are ignored.

        Reads ``rope_theta`` at the top level (transformers 4) or inside ``rope_parameters``
        (transformers 5); a rope scaling other than the plain ``"default"`` is refused, not ignored.
        """
        names = {f.name for f in fields(cls)}
        out = {k: v for k, v in d.items() if k in names}
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            raise ValueError(f"rope scaling {kind!r} is not supported (only plain rotary positions)")
        if "rope_theta" in rope:
            out.setdefault("rope_theta", rope["rope_theta"])
        return cls(**out)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def kv_bytes_per_token(self, dtype: torch.dtype = torch.float32) -> int:
        """Bytes of KV cache one token takes: K and V, every layer, every KV head."""
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * itemsize


def _positive_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
