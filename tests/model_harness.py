"""A hand-driven serving loop for model tests: requests with rows in ReqToTokenPool, slots from a
(scrambled) TokenToKVPoolAllocator, K/V in MHATokenToKVPool, batches built with ForwardBatch.build."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from radixlab.mem_cache import MHATokenToKVPool, ReqToTokenPool, TokenToKVPoolAllocator
from radixlab.model import ForwardBatch, ForwardMode, LlamaForCausalLM


@dataclass
class Req:
    row: int
    tokens: list[int] = field(default_factory=list)  # tokens whose K/V are in the pool
    lora: str | None = None


class Harness:
    def __init__(self, model: LlamaForCausalLM, page_size: int = 1, size: int = 1024, rows: int = 8,
                 max_context_len: int = 256, scramble_seed: int | None = 0) -> None:
        c = model.config
        self.model, self.page_size = model, page_size
        self.req_to_token_pool = ReqToTokenPool(rows, max_context_len, device=model.device)
        self.allocator = TokenToKVPoolAllocator(size, page_size, device=model.device)
        self.kv_pool = MHATokenToKVPool(size, page_size, model.dtype, c.num_key_value_heads, c.head_dim,
                                        c.num_hidden_layers, device=model.device)
        if scramble_seed is not None:  # free pages in a random order: slot numbers say nothing about positions
            pages = self.allocator.alloc(size)
            order = list(range(size // page_size))
            random.Random(scramble_seed).shuffle(order)
            for p in order:
                self.allocator.free(pages[p * page_size:(p + 1) * page_size])

    def new_request(self, lora: str | None = None, share: tuple[Req, int] | None = None) -> Req:
        """A request with a row; ``share=(other, n)`` puts other's first n slots (whole pages) in its row."""
        req = Req(self.req_to_token_pool.alloc(), lora=lora)
        if share is not None:
            other, n = share
            assert n % self.page_size == 0
            self.req_to_token_pool.write(req.row, 0, self.req_to_token_pool.row(other.row, n))
            req.tokens = other.tokens[:n]
        return req

    def step(self, mode: ForwardMode, work: list[tuple[Req, list[int]]]) -> list[torch.Tensor]:
        """Run one batch; returns each request's logits for its new tokens."""
        locs, prefix_lens = [], []
        for req, new in work:
            n = len(req.tokens)
            last = int(self.req_to_token_pool.req_to_token[req.row, n - 1]) if n else -1
            slots = self.allocator.alloc_extend(n, last, len(new))
            assert slots is not None, "test pool too small"
            self.req_to_token_pool.write(req.row, n, slots)
            locs.append(slots)
            prefix_lens.append(n)
        fb = ForwardBatch.build(mode, [new for _, new in work], [r.row for r, _ in work], prefix_lens,
                                torch.cat(locs), lora_ids=[r.lora for r, _ in work], device=self.model.device)
        logits = self.model.forward(fb, self.req_to_token_pool, self.kv_pool)
        out, start = [], 0
        for req, new in work:
            out.append(logits[start:start + len(new)])
            start += len(new)
            req.tokens = req.tokens + list(new)
        return out
