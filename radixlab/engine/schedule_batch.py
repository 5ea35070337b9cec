"""The engine's request (``Req``) and batch (``ScheduleBatch``) — notebooks 07 and 08.

Mirrors ``sglang/srt/managers/schedule_batch.py``. ``Req`` is ``radixlab.mem_cache.common.Request`` (the KV
ownership fields of notebook 05) plus sampling parameters, the adapter, the output and timestamps.
``ScheduleBatch`` is what one model step runs: ``prepare_for_extend`` / ``prepare_for_decode`` allocate
KV slots (evicting from the tree when the pool is short: SGLang's ``alloc_for_extend`` /
``alloc_for_decode``) and collect the lists ``ModelRunner`` turns into a ``ForwardBatch``. Differences
from SGLang: a request's committed KV length is ``seq_len`` (``len(fill_ids)``, SGLang's
``kv_committed_len``), raised when a step's result is processed; ``kv_allocated_len`` sits on the
``Req`` itself (SGLang: ``req.kv``); a decode batch is a new batch of the running requests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch


from ..model.forward_batch import ForwardMode
from ..mem_cache import Request, alloc_at, extend
from .device_backend import FUTURE


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
    # True when the scheduler allocated this step's slots at admission (a cache that caches on
    # allocation, as vLLM's: ``Scheduler._alloc_at_admission``); prepare_for_extend then allocates none
    preallocated: bool = field(default=False, repr=False)
    # The device's view (SGLang: ``req.kv.kv_allocated_len``): row positions allocated, the prompt and
    # every launched step, ahead of ``seq_len`` while a launched step's token is not processed yet
    kv_allocated_len: int = 0
    steps_in_flight: int = 0  # launched steps whose token is not processed yet (the overlap loop)
    launched: bool = False  # the device has seen the request (its sampling state is set up there)

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
        self.mid_chunk: list[bool] = []  # an extend row whose chunk ends before the prompt does
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
        locs = []
        for r in self.reqs:
            if r.preallocated:
                start = r.seq_len - r.extend_input_len
                locs.append(self.req_to_token_pool.req_to_token[r.req_pool_idx, start:r.seq_len])
            else:
                start = r.seq_len
                locs.append(self._alloc(r, r.extend_input_len))
            r.preallocated = False
            r.kv_allocated_len = r.seq_len
            self.prefix_lens.append(start)
            self.new_token_ids.append(r.origin_input_ids[start:r.seq_len])
        self.mid_chunk = [r.seq_len < len(r.origin_input_ids) for r in self.reqs]
        self.out_cache_loc = torch.cat(locs) if locs else self.out_cache_loc

    def prepare_for_decode(self) -> None:
        """Decode step: one new slot per request, at its allocated length (ahead of ``seq_len`` while the
        previous step's token is still in flight); the input is the last token, or a ``FUTURE`` the
        device resolves. ``seq_len`` catches up when the result is processed."""
        self.forward_mode = ForwardMode.DECODE
        self.prefix_lens = [r.kv_allocated_len for r in self.reqs]
        self.new_token_ids = [[FUTURE] if r.steps_in_flight else [r.output_ids[-1]] for r in self.reqs]
        self.mid_chunk = [False] * len(self.reqs)
        locs = [self._alloc_one(r) for r in self.reqs]
        self.out_cache_loc = torch.cat(locs) if locs else self.out_cache_loc

    def _alloc_one(self, req: Req) -> torch.Tensor:
        pos, evicted = req.kv_allocated_len, []
        if alloc_at(self.tree_cache, req.req_pool_idx, pos, 1, on_evict=evicted.append) is None:
            raise RuntimeError(f"KV pool exhausted while decoding request {req.rid!r} (a bug: admission reserves it)")
        self.evicted_tokens += sum(evicted)
        req.kv_allocated_len = pos + 1
        return self.req_to_token_pool.req_to_token[req.req_pool_idx, pos:pos + 1]

    def filter_batch(self, exclude: Req | None = None) -> None:
        """Drop finished requests (and ``exclude``, the request still mid-chunk)."""
        self.reqs = [r for r in self.reqs if not r.is_done() and r is not exclude]

    def merge_batch(self, other: ScheduleBatch, exclude: Req | None = None) -> None:
        """Requests that just finished their prefill join the running (decode) batch (not ``exclude``,
        still mid-chunk, nor a finished one); ``other`` stays as it was launched."""
        self.reqs.extend(r for r in other.reqs if not r.is_done() and r is not exclude)

    def __repr__(self) -> str:
        return f"ScheduleBatch({self.forward_mode.name}, reqs={[r.rid for r in self.reqs]})"
