"""The engine's request (``Req``) and batch (``ScheduleBatch``) — notebook 07_kv_memory_pool.

Mirrors ``sglang/srt/managers/schedule_batch.py``. ``Req`` is ``radixlab.mem_cache.common.Request`` (the KV
ownership fields of notebook 05) plus what serving needs: sampling parameters, the adapter, the
output so far and timestamps. ``ScheduleBatch`` is the set of requests one model step runs:
``prepare_for_extend`` / ``prepare_for_decode`` allocate KV slots (evicting from the tree when the
pool is short — SGLang's ``alloc_for_extend`` / ``alloc_for_decode``) and collect the per-request
lists ``ModelRunner`` turns into a ``ForwardBatch``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch


from ..model.forward_batch import ForwardMode
from ..mem_cache import Request, extend


@dataclass(eq=False, repr=False)
class Req(Request):
    """One generation request inside the engine (SGLang's ``Req``)."""

    max_new_tokens: int = 16
    temperature: float = 0.0
    top_k: int = -1
    top_p: float = 1.0
    sampling_seed: int = 0
    ignore_eos: bool = False
    stop_token_ids: frozenset = frozenset()
    lora_id: str | None = None  # the adapter (SGLang: ``lora_id``, resolved from ``lora_path``)
    index: int = 0  # position in the ``generate`` call's prompt list
    # Filled in by the scheduler:
    cached_tokens: int | None = None  # prefix taken from the tree at first admission
    extend_input_len: int = 0  # new tokens in the current extend step
    finished_reason: str | None = None  # "length" or "stop" once done
    created_time: float = field(default_factory=time.perf_counter)
    first_token_time: float | None = None
    finished_time: float | None = None
    output_logits: list = field(default_factory=list)  # per output token, when the engine keeps them
    generator: torch.Generator | None = None
    # (prefix length, slots) when the scheduler allocated this step's slots at admission (a cache that
    # caches on allocation, as vLLM's does: ``Scheduler._alloc_at_admission``); prepare_for_extend uses them
    preallocated: tuple | None = field(default=None, repr=False)

    def is_done(self) -> bool:
        return self.finished_reason is not None

    def check_finished(self, eos_token_ids: frozenset) -> None:
        """Set ``finished_reason`` after a token was appended (SGLang: ``Req.update_finish_state``)."""
        if len(self.output_ids) >= self.max_new_tokens:
            self.finished_reason = "length"
        elif self.output_ids and not self.ignore_eos and self.output_ids[-1] in (eos_token_ids | self.stop_token_ids):
            self.finished_reason = "stop"


def alloc_slots(req: Req, tree_cache: Any, num_tokens: int) -> tuple[torch.Tensor, int]:
    """Slots for ``req``'s next ``num_tokens`` tokens, written into its row, evicting from the cache
    when the pool is short (SGLang: ``evict_from_tree_cache``); returns (slots, tokens evicted)."""
    start, evicted = req.seq_len, []
    if not extend(req, tree_cache, num_tokens, on_evict=evicted.append):
        raise RuntimeError(f"KV pool exhausted while allocating {num_tokens} slots for request {req.rid!r}: "
                           "the admission budget should have prevented this (a bug)")
    return tree_cache.req_to_token_pool.req_to_token[req.req_pool_idx, start:start + num_tokens], sum(evicted)


class ScheduleBatch:
    """Requests that run in one model step, and the KV slots their new tokens go to."""

    def __init__(self, reqs: list[Req], tree_cache: Any, forward_mode: ForwardMode = ForwardMode.DECODE) -> None:
        self.reqs = list(reqs)
        self.tree_cache = tree_cache
        self.req_to_token_pool = tree_cache.req_to_token_pool
        self.token_to_kv_pool_allocator = tree_cache.token_to_kv_pool_allocator
        self.forward_mode = forward_mode
        self.evicted_tokens = 0  # evictions this batch's allocation caused
        # Filled by prepare_for_extend / prepare_for_decode:
        self.new_token_ids: list[list[int]] = []
        self.prefix_lens: list[int] = []
        self.out_cache_loc = torch.empty(0, dtype=torch.int64)

    def batch_size(self) -> int:
        return len(self.reqs)

    def is_empty(self) -> bool:
        return not self.reqs

    def _alloc(self, req: Req, num_tokens: int) -> torch.Tensor:
        """Slots for ``req``'s next ``num_tokens`` tokens, written into its row; evicts when short."""
        slots, evicted = alloc_slots(req, self.tree_cache, num_tokens)
        self.evicted_tokens += evicted
        return slots

    def prepare_for_extend(self) -> None:
        """Prefill step: each request runs its next ``extend_input_len`` prompt tokens (slots allocated
        here, or already at admission: ``Req.preallocated``)."""
        self.forward_mode = ForwardMode.EXTEND
        pre = [r.preallocated for r in self.reqs]
        self.prefix_lens = [p[0] if p else r.seq_len for r, p in zip(self.reqs, pre)]
        self.new_token_ids = [r.origin_input_ids[n:n + r.extend_input_len] for r, n in zip(self.reqs, self.prefix_lens)]
        locs = [p[1] if p else self._alloc(r, r.extend_input_len) for r, p in zip(self.reqs, pre)]
        for r in self.reqs:
            r.preallocated = None
        self.out_cache_loc = torch.cat(locs) if locs else self.out_cache_loc

    def prepare_for_decode(self) -> None:
        """Decode step: each request runs its last sampled token (one new slot each)."""
        self.forward_mode = ForwardMode.DECODE
        self.prefix_lens = [r.seq_len for r in self.reqs]
        self.new_token_ids = [[r.output_ids[-1]] for r in self.reqs]
        locs = [self._alloc(r, 1) for r in self.reqs]
        self.out_cache_loc = torch.cat(locs) if locs else self.out_cache_loc

    def filter_batch(self, exclude: Req | None = None) -> None:
        """Drop finished requests (and ``exclude``, the request still mid-chunk)."""
        self.reqs = [r for r in self.reqs if not r.is_done() and r is not exclude]

    def merge_batch(self, other: ScheduleBatch) -> None:
        """Requests that just finished their prefill join the running (decode) batch."""
        self.reqs.extend(other.reqs)

    def __repr__(self) -> str:
        return f"ScheduleBatch({self.forward_mode.name}, reqs={[r.rid for r in self.reqs]})"
