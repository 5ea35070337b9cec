"""The Llama building blocks: RMSNorm, rotary positions, SwiGLU MLP, and ``RadixAttention``.

``RadixAttention`` (SGLang's name, ``sglang/srt/layers/radix_attention.py``) is where the KV pool
becomes real: it writes the new tokens' K/V into ``MHATokenToKVPool`` at ``out_cache_loc`` and
reads each request's whole K/V — cached prefix and new tokens — through the request's row,
``req_to_token[req_pool_idx, :seq_len]``. Plain torch (a gather, then attention written out),
one request at a time: slow, but every index is visible. Notebook 07_kv_memory_pool teaches it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from ..mem_cache import MHATokenToKVPool, ReqToTokenPool
    from .forward_batch import ForwardBatch


class RMSNorm(nn.Module):
    """``x / rms(x) * weight``, computed in fp32 as Hugging Face's ``LlamaRMSNorm`` does."""

    def __init__(self, hidden_size: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class RotaryEmbedding(nn.Module):
    """Rotary positions with Hugging Face's convention: dimension ``i`` pairs with ``i + head_dim/2``
    (``rotate_half``), frequencies ``rope_theta ** (-2i / head_dim)``."""

    def __init__(self, head_dim: int, rope_theta: float) -> None:
        super().__init__()
        exps = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
        self._inv_freq = {torch.device("cpu"): 1.0 / (rope_theta ** exps)}  # float32, computed once on the CPU

    def inv_freq(self, device: torch.device) -> torch.Tensor:
        """The frequencies in float32 on ``device`` (the CPU's values, copied: bit-identical everywhere).

        Not a buffer on purpose: ``model.to(bfloat16)`` would round them to 8 bits of mantissa, and
        at position p the angle p * f would then be off by up to p * f / 256 radians. SGLang too
        computes its cos/sin cache in float32 (``layers/rotary_embedding/base.py``), and keeps it so on
        CUDA for the fused kernel's head sizes; its fallback path casts it to the query's dtype.
        """
        if device not in self._inv_freq:
            self._inv_freq[device] = self._inv_freq[torch.device("cpu")].to(device)
        return self._inv_freq[device]

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos, sin`` of shape ``[T, head_dim]`` for the tokens at ``positions``."""
        freqs = positions.float()[:, None] * self.inv_freq(positions.device)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[T, heads, head_dim]`` by its tokens' angles (``cos``/``sin`` ``[T, head_dim]``)."""
    cos, sin = cos[:, None, :].to(x.dtype), sin[:, None, :].to(x.dtype)
    return x * cos + rotate_half(x) * sin


class LlamaMLP(nn.Module):
    """SwiGLU: ``down_proj(silu(gate_proj(x)) * up_proj(x))``."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float,
              q_positions: torch.Tensor) -> torch.Tensor:
    """Causal attention of queries ``q`` ``[Tq, H, D]`` at ``q_positions`` over keys/values
    ``k, v`` ``[Tk, Hkv, D]`` at positions ``0 .. Tk-1``: query at position p sees keys 0..p.

    Grouped-query attention: each KV head serves ``H // Hkv`` consecutive query heads. Written out
    (scores, mask, softmax in fp32, weighted sum) rather than ``F.scaled_dot_product_attention``:
    the same few lines serve the dense and the pool path, and on a small CPU model they are faster.
    """
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # heads first: [H, T, D]
    scores = (q @ k.transpose(1, 2)).float() * scaling                  # [H, Tq, Tk]
    allowed = torch.arange(k.shape[1], device=q.device)[None, :] <= q_positions[:, None]
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1).to(v.dtype)
    return (probs @ v).transpose(0, 1)                                  # [Tq, H, D]


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float) -> torch.Tensor:
    """Plain causal attention over one sequence (``forward_dense``, no pool)."""
    return attention(q, k, v, scaling, torch.arange(q.shape[0], device=q.device))


def gather_kv(req_to_token: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor,
              req_pool_idx: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A request's K and V, ``[seq_len, kv_heads, head_dim]`` each, in position order.

    The request's row names the slot of each of its tokens, prefix included: position ``p`` lives
    in slot ``req_to_token[req_pool_idx, p]``, and its K/V in that row of the layer's buffers.
    """
    slots = req_to_token[req_pool_idx, :seq_len]
    return k_buffer[slots], v_buffer[slots]


class RadixAttention(nn.Module):
    """Attention that reads and writes K/V in the pool by slot index (SGLang's ``RadixAttention``).

    No weights: the projections live in ``LlamaAttention``; this layer only moves K/V and attends.
    """

    def __init__(self, num_heads: int, head_dim: int, scaling: float, num_kv_heads: int, layer_id: int) -> None:
        super().__init__()
        self.tp_q_head_num, self.tp_k_head_num = num_heads, num_kv_heads  # SGLang's attribute names
        self.head_dim, self.scaling, self.layer_id = head_dim, scaling, layer_id
        # Exercise 07.1's check plugs a student's gather in here (same signature as ``gather_kv``);
        # None: ``gather_kv`` (looked up when called: the grader's executor runs without it).
        self.gather_fn: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, forward_batch: "ForwardBatch",
                req_to_token_pool: "ReqToTokenPool", token_to_kv_pool: "MHATokenToKVPool") -> torch.Tensor:
        """``q`` ``[T, H, D]``, ``k, v`` ``[T, Hkv, D]`` for the batch's new tokens → output ``[T, H, D]``."""
        # 1. Save the new tokens' K/V in their slots: from now on the pool is the only copy.
        token_to_kv_pool.set_kv_buffer(self.layer_id, forward_batch.out_cache_loc, k, v)
        k_buffer = token_to_kv_pool.get_key_buffer(self.layer_id)
        v_buffer = token_to_kv_pool.get_value_buffer(self.layer_id)
        out = torch.empty_like(q)
        start = 0
        rows = forward_batch.req_pool_indices.tolist()
        prefix_lens = forward_batch.extend_prefix_lens.tolist()
        extend_lens = forward_batch.extend_seq_lens.tolist()
        for row, prefix_len, extend_len in zip(rows, prefix_lens, extend_lens):
            seq_len = prefix_len + extend_len
            # 2. Gather the request's K/V, cached prefix and new tokens, in position order.
            gather = self.gather_fn or gather_kv
            k_seq, v_seq = gather(req_to_token_pool.req_to_token, k_buffer, v_buffer, row, seq_len)
            # 3. New token j sits at position prefix_len + j and may see positions 0 .. prefix_len + j.
            q_positions = torch.arange(prefix_len, seq_len, device=q.device)
            end = start + extend_len
            out[start:end] = attention(q[start:end], k_seq, v_seq, self.scaling, q_positions)
            start = end
        return out
