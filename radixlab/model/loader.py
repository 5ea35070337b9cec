"""``load_model(name)``: the tiny random model for tests and benchmarks, or the pretrained SmolLM2-135M.

``"tiny"`` is seeded: the same weights on every machine and device (drawn on the CPU, then moved).
Its weights are scaled so the top-1/top-2 logit gap is far above fp32 noise (``TINY_LOGIT_SCALE``),
which is what makes "the radix cache gives exactly the tokens of dense greedy decoding" a testable claim.
"""

from __future__ import annotations

import torch

from ..device import default_device
from ..tokenizer import ByteTokenizer
from .config import ModelConfig
from .llama import LlamaForCausalLM

MODEL_NAMES = ("tiny", "smollm2-135m")

TINY_SEED = 0
TINY_LOGIT_SCALE = 16.0
"""Std of the tiny model's logits. Logits of random weights are continuous, so a near-tie is never
impossible, only rare: what counts is the ratio of the top-1/top-2 gap to the fp32 difference between
the pool path and ``forward_dense``, and that ratio does not depend on the scale. Measured on CPU over
360 greedy decisions (40 random prompts, 8 decode steps each, ``tests/test_model.py``): median gap ≈ 3.6,
smallest ≈ 1.3e-3, largest pool-vs-dense difference ≈ 4e-5. So a decision flips only when its gap falls
below ~4e-5, about one decision in 50,000."""


def tiny_config() -> ModelConfig:
    """TinyLM: 4 layers, hidden 64, 4 query heads sharing 2 KV heads, byte vocabulary, no EOS."""
    return ModelConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, intermediate_size=176, vocab_size=256, rope_theta=10000.0,
                       rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=4096,
                       bos_token_id=None, eos_token_id=None)


def init_tiny_weights(model: LlamaForCausalLM, seed: int = TINY_SEED, logit_scale: float = TINY_LOGIT_SCALE) -> None:
    """Seeded random weights: unit-variance embeddings, ``1/sqrt(fan_in)`` projections (activations
    keep their size through the layers), and an ``lm_head`` giving logits of std ``logit_scale``."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                w = 1.0 + 0.1 * torch.randn(p.shape, generator=gen)
            elif name == "model.embed_tokens.weight":
                w = torch.randn(p.shape, generator=gen)
            elif name == "lm_head.weight":
                w = torch.randn(p.shape, generator=gen) * logit_scale / p.shape[1] ** 0.5
            else:
                w = torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5
            p.copy_(w.to(p.device, p.dtype))


def load_tiny(device: str | torch.device | None = None, dtype: torch.dtype = torch.float32,
              seed: int = TINY_SEED) -> LlamaForCausalLM:
    model = LlamaForCausalLM(tiny_config(), tokenizer=ByteTokenizer())
    init_tiny_weights(model, seed)
    return model.to(device=default_device() if device is None else device, dtype=dtype).eval()


def load_model(name: str, device: str | torch.device | None = None,
               dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    """``"tiny"`` (seeded random, byte tokenizer) or ``"smollm2-135m"`` (SmolLM2-135M-Instruct from its GGUF).

    ``device`` defaults to ``radixlab.device.default_device()``; fp32 by default.
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    if device is None:
        device = default_device()
    if name == "tiny":
        return load_tiny(device=device, dtype=dtype)
    if name == "smollm2-135m":
        from .smollm2 import load_smollm2  # imports transformers and gguf: only when asked for
        return load_smollm2(device=device, dtype=dtype)
    raise ValueError(f"unknown model name {name!r}; choose one of {list(MODEL_NAMES)}")
