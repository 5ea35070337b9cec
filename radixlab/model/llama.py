"""``LlamaForCausalLM``: the decoder of Llama, SmolLM2 and Qwen, wired from ``layers.py``.

Parameter names are exactly those of Hugging Face's ``LlamaForCausalLM`` (``model.layers.0.self_attn.q_proj.weight``
…), so a ``transformers`` state dict loads with ``load_state_dict``. Two ways to run it:

* ``forward_dense(input_ids)``: one sequence, plain causal attention, no pool — the reference.
* ``forward(forward_batch, req_to_token_pool, token_to_kv_pool)``: the serving path. Attention
  (``RadixAttention``) writes new K/V into the pool and reads each request's prefix from it.
  Returns the logits of **every new token** of the batch, ``[len(input_ids), vocab]`` (in DECODE,
  one row per request); ``forward_batch.last_token_indices()`` picks each request's last row, and
  ``last_only=True`` returns just those (cheaper for a big vocabulary).

Adapters stand in for LoRA (SGLang's ``lora_path``): ``add_adapter(name)`` adds a seeded low-rank
delta to ``q_proj`` and ``v_proj`` of every layer. Because it changes V, K/V computed under one
adapter are wrong for another — which is why the engine puts the adapter into the request's
namespace (``extra_key``), under the adapter's ``lora_id``: each load has its own (the name for its
first load, ``(name, n)`` for its n-th), as SGLang gives every loaded adapter a fresh id, so a
replaced adapter never reuses its predecessor's KV. Adapters are kept outside ``state_dict`` (Hugging
Face keys stay exact).
Notebook 07_kv_memory_pool teaches the serving path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import torch
from torch import nn

from .config import ModelConfig
from .layers import LlamaMLP, RadixAttention, RMSNorm, RotaryEmbedding, apply_rotary, causal_attention

if TYPE_CHECKING:
    from ..memory import MHATokenToKVPool, ReqToTokenPool
    from .forward_batch import ForwardBatch

LORA_TARGETS = ("q_proj", "v_proj")


@dataclass
class Adapter:
    """A seeded low-rank weight delta: ``W + scale * B @ A`` on ``q_proj`` and ``v_proj`` of every layer."""

    name: str
    rank: int
    scale: float
    weights: list[dict[str, tuple[torch.Tensor, torch.Tensor]]]  # per layer: target -> (A [r, in], B [out, r])
    lora_id: Any = None  # this load's id (SGLang: ``LoRARef.lora_id``), set by ``add_adapter``

    def delta(self, layer_id: int, target: str, x: torch.Tensor) -> torch.Tensor:
        a, b = self.weights[layer_id][target]
        a, b = a.to(device=x.device, dtype=x.dtype), b.to(device=x.device, dtype=x.dtype)
        return self.scale * ((x @ a.T) @ b.T)


# Which adapter applies to which rows of the batch's tokens: [(slice of token rows, adapter)].
LoraPlan = list[tuple[slice, Adapter]]


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer_id: int) -> None:
        super().__init__()
        h, kv, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim, self.layer_id = h, kv, d, layer_id
        self.q_proj = nn.Linear(config.hidden_size, h * d, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, kv * d, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, config.hidden_size, bias=False)
        self.attn = RadixAttention(h, d, d ** -0.5, kv, layer_id)

    def _project(self, name: str, x: torch.Tensor, lora: LoraPlan) -> torch.Tensor:
        out = getattr(self, name)(x)
        for rows, adapter in lora:
            out[rows] = out[rows] + adapter.delta(self.layer_id, name, x[rows])
        return out

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, lora: LoraPlan,
                serving: tuple | None, kv_sink: list | None) -> torch.Tensor:
        t = x.shape[0]
        q = self._project("q_proj", x, lora).view(t, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(t, self.num_kv_heads, self.head_dim)
        v = self._project("v_proj", x, lora).view(t, self.num_kv_heads, self.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if kv_sink is not None:
            kv_sink.append((k.detach().clone(), v.detach().clone()))
        if serving is None:
            o = causal_attention(q, k, v, self.attn.scaling)
        else:
            o = self.attn(q, k, v, *serving)
        return self.o_proj(o.reshape(t, self.num_heads * self.head_dim))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_id: int) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(config, layer_id)
        self.mlp = LlamaMLP(config.hidden_size, config.intermediate_size)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, lora: LoraPlan,
                serving: tuple | None, kv_sink: list | None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, lora, serving, kv_sink)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config.head_dim, config.rope_theta)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, lora: LoraPlan,
                serving: tuple | None = None, kv_sink: list | None = None) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb(positions)
        for layer in self.layers:
            x = layer(x, cos, sin, lora, serving, kv_sink)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    """A Llama-architecture causal LM; see the module docstring for its two forward paths."""

    def __init__(self, config: ModelConfig, tokenizer: Any = None) -> None:
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config must be a ModelConfig, got {type(config).__name__}")
        self.config = config
        self.tokenizer = tokenizer
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.adapters: dict[str, Adapter] = {}
        self._adapter_loads: dict[str, int] = {}  # name -> how many times it was loaded (for lora_id)

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    def load_state_dict(self, state_dict: dict, strict: bool = True, assign: bool = False):  # type: ignore[override]
        """``nn.Module.load_state_dict``; a tied checkpoint may omit ``lm_head.weight`` (HF saves it once)."""
        if self.config.tie_word_embeddings and "lm_head.weight" not in state_dict:
            state_dict = {**state_dict, "lm_head.weight": state_dict.get("model.embed_tokens.weight")}
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    # ---- adapters -------------------------------------------------------------------------------

    def add_adapter(self, name: str, seed: int = 0, scale: float = 1.0, rank: int = 4) -> Adapter:
        """Add a named adapter: a seeded random low-rank delta on ``q_proj`` and ``v_proj`` of every layer."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"adapter name must be a non-empty str, got {name!r}")
        if name in self.adapters:
            raise ValueError(f"adapter {name!r} already exists")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"rank must be a positive int, got {rank!r}")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise ValueError(f"scale must be a number, got {scale!r}")
        gen = torch.Generator().manual_seed(seed)
        weights = []
        for layer in self.model.layers:
            per_target = {}
            for target in LORA_TARGETS:
                lin = getattr(layer.self_attn, target)
                a = torch.randn(rank, lin.in_features, generator=gen) / lin.in_features ** 0.5
                b = torch.randn(lin.out_features, rank, generator=gen) / rank ** 0.5
                per_target[target] = (a.to(self.device, self.dtype), b.to(self.device, self.dtype))
            weights.append(per_target)
        loads = self._adapter_loads[name] = self._adapter_loads.get(name, 0) + 1
        adapter = Adapter(name, rank, float(scale), weights, lora_id=name if loads == 1 else (name, loads))
        self.adapters[name] = adapter
        return adapter

    def remove_adapter(self, name: str) -> None:
        """Unload adapter ``name`` (SGLang: ``unload_lora_adapter``); a later ``add_adapter(name)`` is a
        new load, with its own ``lora_id``."""
        if name not in self.adapters:
            raise ValueError(f"no adapter named {name!r}; known: {sorted(self.adapters)}")
        del self.adapters[name]

    def _adapter(self, name: str | None, what: str) -> Adapter | None:
        if name is None:
            return None
        if name not in self.adapters:
            raise ValueError(f"{what} names unknown adapter {name!r}; known: {sorted(self.adapters)} (None = base model)")
        return self.adapters[name]

    # ---- forward paths --------------------------------------------------------------------------

    def _check_ids(self, ids: torch.Tensor, name: str) -> None:
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.config.vocab_size):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise ValueError(f"{name} holds token id {bad}, outside the vocabulary (0 .. {self.config.vocab_size - 1})")

    def _dense_inputs(self, input_ids: Any) -> torch.Tensor:
        if not isinstance(input_ids, torch.Tensor):
            input_ids = torch.as_tensor(input_ids, dtype=torch.int64)
        if input_ids.dim() != 1 or input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
            raise ValueError(f"input_ids must be a 1-D integer tensor, got {input_ids.dtype} with shape "
                             f"{tuple(input_ids.shape)}")
        if not 1 <= len(input_ids) <= self.config.max_position_embeddings:
            raise ValueError(f"input_ids must hold 1 .. {self.config.max_position_embeddings} tokens, got {len(input_ids)}")
        self._check_ids(input_ids, "input_ids")
        return input_ids.to(self.device, torch.int64)

    @torch.no_grad()
    def forward_dense(self, input_ids: torch.Tensor, lora_path: str | None = None) -> torch.Tensor:
        """Logits ``[T, vocab]`` of one sequence, plain causal attention, no pool: the reference."""
        ids = self._dense_inputs(input_ids)
        lora = self._lora_plan([lora_path], [len(ids)], "lora_path")
        positions = torch.arange(len(ids), device=self.device)
        return self.lm_head(self.model(ids, positions, lora))

    @torch.no_grad()
    def dense_kv(self, input_ids: torch.Tensor, lora_path: str | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, the K (after rotary) and V ``[T, num_key_value_heads, head_dim]`` that
        ``forward_dense`` computes: what the pool must hold for these tokens (exercise 07.1)."""
        ids = self._dense_inputs(input_ids)
        sink: list = []
        self.model(ids, torch.arange(len(ids), device=self.device),
                   self._lora_plan([lora_path], [len(ids)], "lora_path"), kv_sink=sink)
        return sink

    def _lora_plan(self, names: Sequence[str | None], lengths: Sequence[int], what: str) -> LoraPlan:
        plan, start = [], 0
        for name, n in zip(names, lengths):
            adapter = self._adapter(name, what)
            if adapter is not None:
                plan.append((slice(start, start + n), adapter))
            start += n
        return plan

    @torch.no_grad()
    def forward(self, forward_batch: "ForwardBatch", req_to_token_pool: "ReqToTokenPool",
                token_to_kv_pool: "MHATokenToKVPool", last_only: bool = False) -> torch.Tensor:
        """The serving path: logits ``[len(forward_batch.input_ids), vocab]``, one row per new token.

        ``last_only=True`` returns only each request's last row, ``[batch_size, vocab]``, and skips the
        ``lm_head`` for the others (what a serving engine samples from; SGLang's ``LogitsProcessor``
        prunes the same way). In DECODE both are the same.
        """
        self._check_serving(forward_batch, req_to_token_pool, token_to_kv_pool)
        fb = forward_batch
        ids, positions = fb.input_ids.to(self.device), fb.positions.to(self.device)
        lengths = fb.extend_seq_lens.tolist()
        lora = self._lora_plan(fb.lora_ids or [None] * fb.batch_size, lengths, "forward_batch.lora_ids")
        hidden = self.model(ids, positions, lora, serving=(fb, req_to_token_pool, token_to_kv_pool))
        if last_only:
            hidden = hidden[fb.last_token_indices().to(self.device)]
        return self.lm_head(hidden)

    def _check_serving(self, fb: "ForwardBatch", req_to_token_pool: "ReqToTokenPool",
                       pool: "MHATokenToKVPool") -> None:
        c = self.config
        if (pool.layer_num, pool.head_num, pool.head_dim) != (c.num_hidden_layers, c.num_key_value_heads, c.head_dim):
            raise ValueError(f"token_to_kv_pool has (layer_num, head_num, head_dim)=({pool.layer_num}, {pool.head_num}, "
                             f"{pool.head_dim}), this model needs ({c.num_hidden_layers}, {c.num_key_value_heads}, {c.head_dim})")
        self._check_ids(fb.input_ids, "forward_batch.input_ids")
        width, rows = req_to_token_pool.max_context_len, req_to_token_pool.size
        if int(fb.seq_lens.max()) > min(width, c.max_position_embeddings):
            raise ValueError(f"forward_batch.seq_lens holds {int(fb.seq_lens.max())}, more than the request rows "
                             f"({width}) or the model ({c.max_position_embeddings}) allow")
        if int(fb.req_pool_indices.min()) < 0 or int(fb.req_pool_indices.max()) >= rows:
            raise ValueError(f"forward_batch.req_pool_indices must be rows 0 .. {rows - 1}, got {fb.req_pool_indices.tolist()}")
