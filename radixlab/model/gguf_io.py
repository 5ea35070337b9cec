"""Read a llama-architecture GGUF file into Hugging Face names: config fields and fp32 tensors.

GGUF is llama.cpp's single-file format: metadata (``llama.*`` keys) plus tensors, here mostly
quantized (Q4_1 blocks: 32 weights share a scale and a minimum). The ``gguf`` package, llama.cpp's
own Python reader, parses the file and dequantizes every tensor to float32; this module renames the
tensors to the names ``transformers``' ``LlamaForCausalLM`` uses (and so does
``radixlab.model.llama``), and undoes one layout change llama.cpp makes to Q and K (see
:func:`unpermute_rotary_rows`). ``gguf`` is imported only when a file is read.

Used by :mod:`radixlab.model.smollm2` (notebook 07 serves SmolLM2-135M-Instruct from such a file).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

# GGUF tensor name (per block: blk.N.<name>) -> Hugging Face name (per layer: model.layers.N.<name>).
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")


def hf_name(gguf_name: str) -> str:
    """The Hugging Face state-dict key of GGUF tensor ``gguf_name`` (``blk.3.attn_q.weight`` →
    ``model.layers.3.self_attn.q_proj.weight``); ``ValueError`` for a tensor a plain Llama lacks."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _BLOCK_RE.match(gguf_name)
    if m and m.group(2) in _BLOCK_NAMES:
        return f"model.layers.{m.group(1)}.{_BLOCK_NAMES[m.group(2)]}"
    raise ValueError(f"GGUF tensor {gguf_name!r} has no place in a plain Llama model (unsupported file)")


def permute_rotary_rows(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """What llama.cpp's ``convert_hf_to_gguf.py`` does to Q/K rows: Hugging Face's rotary embedding
    pairs dimension ``i`` of a head with ``i + head_dim/2`` (rotate_half); llama.cpp pairs ``2i``
    with ``2i+1``. The converter reorders each head's rows from ``[x_0..x_{d/2-1}, y_0..y_{d/2-1}]``
    to ``[x_0, y_0, x_1, y_1, ...]`` so that llama.cpp's interleaved rotary gives the same result.
    Kept here for the tests (round trip) and for readers; loading uses the inverse."""
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise ValueError(f"{rows} rows cannot hold {n_head} heads of even size")
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def unpermute_rotary_rows(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """The inverse of :func:`permute_rotary_rows`: GGUF row ``h*d + 2i + s`` (``s`` = 0 or 1) goes
    back to Hugging Face row ``h*d + s*d/2 + i``, for each of the ``n_head`` heads of size ``d``.
    For K, ``n_head`` is the number of KV heads."""
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise ValueError(f"{rows} rows cannot hold {n_head} heads of even size")
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _field(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


def _float32_decimal(x: float) -> float:
    """GGUF stores eps as float32 (1e-5 reads back as 9.9999997e-06); keep the short decimal the
    original config had, which rounds to the same float32."""
    return float(str(np.float32(x)))


def read_config(reader: Any) -> dict[str, Any]:
    """Hugging Face ``LlamaConfig`` fields from a GGUF reader's ``llama.*`` metadata."""
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"expected a GGUF of architecture 'llama', got {arch!r}")
    if _field(reader, "llama.rope.scaling.type") not in (None, "none"):
        raise ValueError("GGUF files with rope scaling are not supported")

    def need(key: str) -> Any:
        value = _field(reader, key)
        if value is None:
            raise ValueError(f"GGUF metadata is missing {key!r}")
        return value

    hidden = int(need("llama.embedding_length"))
    heads = int(need("llama.attention.head_count"))
    names = {t.name for t in reader.tensors}
    vocab = _field(reader, "llama.vocab_size")
    if vocab is None:  # older files: the token list's length
        vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    return {
        "hidden_size": hidden,
        "num_hidden_layers": int(need("llama.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_field(reader, "llama.attention.head_count_kv", heads)),
        "head_dim": int(_field(reader, "llama.attention.key_length", hidden // heads)),
        "intermediate_size": int(need("llama.feed_forward_length")),
        "vocab_size": int(vocab),
        "rope_theta": float(_field(reader, "llama.rope.freq_base", 10000.0)),
        "rms_norm_eps": _float32_decimal(need("llama.attention.layer_norm_rms_epsilon")),
        "tie_word_embeddings": "output.weight" not in names,
        "max_position_embeddings": int(need("llama.context_length")),
        "bos_token_id": int(need("tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(need("tokenizer.ggml.eos_token_id")),
    }


def read_gguf(
    path: str | Path, progress: Callable[[int, int], Any] | None = None
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Config fields and float32 tensors (Hugging Face names, Q/K rows un-permuted) of a llama GGUF.

    ``progress(done, total)``, if given, is called with ``done=0`` once the header is parsed (a few
    seconds: the file holds 49k tokenizer strings) and then after each tensor is dequantized. With tied embeddings the file has no
    ``output.weight`` and the result no ``lm_head.weight``.
    """
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(path))
    config = read_config(reader)
    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    tensors: dict[str, torch.Tensor] = {}
    if progress is not None:
        progress(0, len(reader.tensors))
    for done, t in enumerate(reader.tensors, 1):
        name = hf_name(t.name)
        # GGUF lists dims fastest-first; dequantize returns numpy's row-major (out, in) shape already.
        # (a copy: F32 tensors come back as read-only views of the memory-mapped file)
        w = torch.from_numpy(np.array(dequantize(t.data, t.tensor_type), dtype=np.float32, order="C"))
        if name.endswith("q_proj.weight"):
            w = unpermute_rotary_rows(w, n_head)
        elif name.endswith("k_proj.weight"):
            w = unpermute_rotary_rows(w, n_kv)
        tensors[name] = w.contiguous()
        if progress is not None:
            progress(done, len(reader.tensors))
    _check_shapes(config, tensors)
    return config, tensors


def _check_shapes(config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    """Every tensor a Llama of this config needs is present with its shape; nothing else is."""
    h, d, v, f = config["hidden_size"], config["head_dim"], config["vocab_size"], config["intermediate_size"]
    q, kv = config["num_attention_heads"] * d, config["num_key_value_heads"] * d
    want = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    if not config["tie_word_embeddings"]:
        want["lm_head.weight"] = (v, h)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        want |= {
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h), p + "mlp.down_proj.weight": (h, f),
        }
    missing = sorted(set(want) - set(tensors))
    extra = sorted(set(tensors) - set(want))
    if missing or extra:
        raise ValueError(f"GGUF tensors do not match the config: missing {missing[:4]}, unexpected {extra[:4]}")
    for name, shape in want.items():
        if tuple(tensors[name].shape) != shape:
            raise ValueError(f"GGUF tensor for {name} has shape {tuple(tensors[name].shape)}, expected {shape}")
