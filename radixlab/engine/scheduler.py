"""The scheduler: a waiting queue, a running batch and the normal event loop (notebook 07).

Mirrors ``sglang/srt/managers/scheduler.py``. One loop iteration is three separate steps, so that
an overlap loop can later run them out of step:

1. ``get_next_batch_to_run`` (schedule): merge the last prefill batch into the running batch, then
   build a new prefill batch if anything waiting fits; if nothing does, the running batch decodes.
2. ``run_batch`` (launch): the model runs the batch and samples one token per request.
3. ``process_batch_result``: append the tokens, finish requests (``cache_finished_req``: the tree
   adopts their KV), hand the KV of requests still running to the tree (``cache_unfinished_req``)
   so later requests can share it.

Admission (in ``get_new_batch_prefill``): ``match_prefix`` → budget check (``PrefillAdder``) →
``admit`` (lock + row); for a cache that caches blocks when they are allocated (vLLM's hash cache),
also the step's slots at once (``_alloc_at_admission``), so the next request of the batch can hit
them. A request that does not fit yet waits in the queue; every admitted request has all the KV it
can ever need reserved, so nothing fails mid-run (no retraction needed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..mem_cache import admit, release
from .model_runner import GenerationBatchResult, ModelRunner
from .schedule_batch import Req, ScheduleBatch, alloc_slots
from .schedule_policy import AddReqResult, PrefillAdder, SchedulePolicy


@dataclass
class SchedulerStats:
    """Counters since the engine started (or ``reset``): what the benchmark and notebook 07 print."""

    prefill_tokens: int = 0  # prompt tokens computed (extend), cached prefixes excluded
    cached_tokens: int = 0  # prompt tokens taken from the tree
    decode_tokens: int = 0
    extend_batches: int = 0
    decode_batches: int = 0
    evicted_tokens: int = 0
    max_running: int = 0
    held_back: int = 0  # admissions postponed by the in-batch prefix check (cache-aware policies)

    def reset(self) -> None:
        self.__init__()


class Scheduler:
    """Decides what runs next and keeps every request's KV accounted for."""

    def __init__(self, model_runner: ModelRunner, tree_cache: Any, policy: SchedulePolicy, *,
                 max_running_requests: int, chunked_prefill_size: int | None, max_prefill_tokens: int,
                 eos_token_ids: frozenset = frozenset(), keep_logits: bool = False) -> None:
        self.model_runner = model_runner
        self.tree_cache = tree_cache
        self.req_to_token_pool = tree_cache.req_to_token_pool
        self.token_to_kv_pool_allocator = tree_cache.token_to_kv_pool_allocator
        self.page_size = self.token_to_kv_pool_allocator.page_size
        self.policy = policy
        self.max_running_requests = max_running_requests
        self.chunked_prefill_size = chunked_prefill_size
        self.max_prefill_tokens = max_prefill_tokens
        self.eos_token_ids = eos_token_ids
        self.keep_logits = keep_logits
        self.waiting_queue: list[Req] = []
        self.running_batch = ScheduleBatch([], tree_cache)
        self.chunked_req: Req | None = None  # the request in the middle of a chunked prefill
        self._admitting: list[Req] = []  # the prefill batch being built (abort_all must see it too)
        self.last_batch: ScheduleBatch | None = None
        self.stats = SchedulerStats()

    # -- the queue --------------------------------------------------------------------------------

    def add_request(self, req: Req) -> None:
        self.waiting_queue.append(req)

    def has_work(self) -> bool:
        last = self.last_batch.reqs if self.last_batch is not None else []
        return bool(self.waiting_queue or self.chunked_req
                    or any(not r.is_done() for r in self.running_batch.reqs + last))

    # -- 1. schedule ------------------------------------------------------------------------------

    def get_next_batch_to_run(self) -> ScheduleBatch | None:
        # 1. The chunked request's last chunk goes to the tree (SGLang: stash_chunked_request).
        if self.chunked_req is not None:
            self.tree_cache.cache_unfinished_req(self.chunked_req, chunked=True)
        # 2. Requests whose prefill just ran join the running batch.
        if self.last_batch is not None and self.last_batch.forward_mode.is_extend():
            self.last_batch.filter_batch(exclude=self.chunked_req)
            self.running_batch.merge_batch(self.last_batch)
        self.running_batch.filter_batch()
        # 3. Prefill first when anything waiting fits; otherwise decode the running batch.
        batch = self.get_new_batch_prefill()
        if batch is None and not self.running_batch.is_empty():
            batch = self._prepare_for_decode(self.running_batch)
        self.last_batch = batch
        return batch

    def _prepare_for_decode(self, running: ScheduleBatch) -> ScheduleBatch | None:
        """The running batch decodes one token per request (the overlap scheduler overrides this: its
        decode batches are built from future token ids, notebook 08)."""
        running.prepare_for_decode()
        self.stats.evicted_tokens += running.evicted_tokens
        running.evicted_tokens = 0
        return running

    def get_new_batch_prefill(self) -> ScheduleBatch | None:
        """A prefill batch of waiting requests that fit (the chunked request first), or None."""
        if not self.waiting_queue and self.chunked_req is None:
            return None
        in_flight = self.running_batch.reqs + ([self.chunked_req] if self.chunked_req else [])
        adder = PrefillAdder(self.tree_cache, self.token_to_kv_pool_allocator, in_flight, self.page_size,
                             self.max_prefill_tokens, self.chunked_prefill_size,
                             min(self.max_running_requests - len(in_flight), self.req_to_token_pool.available_size()))
        self._admitting = adder.can_run_list  # until the batch is built, these are in no other list
        if self.chunked_req is not None:
            req = self.chunked_req
            self.chunked_req = adder.add_chunked_req(req)
            if adder.can_run_list and adder.can_run_list[-1] is req:
                self._alloc_at_admission(req, adder)
        elif adder.rem_rows <= 0:
            return None  # no free row: skip the ordering (it matches every waiting request), as SGLang
        self.policy.calc_priority(self.waiting_queue)
        # The in-batch check's rids: out of this batch (radixlab's default), or only sorted last (SGLang).
        held_back = getattr(self.policy, "deprioritized", ()) if getattr(self.policy, "hold_back", True) else ()
        admitted = []
        for req in self.waiting_queue:
            if self.chunked_req is not None:
                break  # one chunked request at a time
            if req.rid in held_back:
                # In-batch prefix check (notebook 09): a request earlier in this queue shares a long
                # uncached prefix with this one; it computes it now, this one reuses it next batch.
                self.stats.held_back += 1
                continue
            # Peek at the cached prefix; locking it would take its nodes out of the evictable pool.
            match = self.tree_cache.match_prefix(req.admit_key(), req)
            result = adder.add_one_req(req, len(match), self._unlocked_on_path(match.last_node))
            if result is not AddReqResult.CONTINUE and adder.new_chunked_req is not req:
                break
            # match → lock → row (notebook 05's admit); the first admission fixes cached_tokens.
            admit(req, self.tree_cache)
            req.cached_tokens = req.cache_protected_len
            admitted.append(req)
            self._alloc_at_admission(req, adder)
            if adder.new_chunked_req is req:
                self.chunked_req = req
                break
        if not adder.can_run_list:
            self._admitting = []
            return None
        self.waiting_queue = [r for r in self.waiting_queue if r not in admitted]
        batch = ScheduleBatch(adder.can_run_list, self.tree_cache)
        batch.prepare_for_extend()
        self.stats.evicted_tokens += batch.evicted_tokens
        self._admitting = []
        self.stats.cached_tokens += sum(r.cached_tokens for r in admitted)
        return batch

    def _alloc_at_admission(self, req: Req, adder: PrefillAdder) -> None:
        """For a cache that caches on allocation (vLLM's, ``HashBlockCache.caches_on_alloc``): the
        request's slots for this step now, and its full blocks into the cache at once, as vLLM's
        ``allocate_slots`` does. A request admitted after it in the same batch then hits those blocks:
        their KV is written in the same forward, layer by layer, before any request's attention reads
        it. A radix cache (SGLang) adopts a prefill's KV only after it ran: nothing happens here."""
        if not self.tree_cache.caches_on_alloc or req.extend_input_len <= 0:
            return
        prefix = req.seq_len
        slots, evicted = alloc_slots(req, self.tree_cache, req.extend_input_len)
        req.preallocated = (prefix, slots)
        self.stats.evicted_tokens += evicted
        adder.allocated(req, prefix)
        self.tree_cache.cache_at_allocation(req)

    def _unlocked_on_path(self, node: Any) -> int:
        """Evictable tokens between ``node`` and the root: locking ``node`` would protect them."""
        total = 0
        while node is not None and node is not self.tree_cache.root_node:
            if node.lock_ref == 0:
                total += len(node.key)
            node = node.parent
        return total

    # -- 2. launch --------------------------------------------------------------------------------

    def run_batch(self, batch: ScheduleBatch) -> GenerationBatchResult:
        return self.model_runner.forward(batch)

    # -- 3. process -------------------------------------------------------------------------------

    def process_batch_result(self, batch: ScheduleBatch, result: GenerationBatchResult) -> None:
        now = time.perf_counter()
        if batch.forward_mode.is_extend():
            self.stats.extend_batches += 1
            self.stats.prefill_tokens += sum(len(t) for t in batch.new_token_ids)
        else:
            self.stats.decode_batches += 1
            self.stats.decode_tokens += batch.batch_size()
        self.stats.max_running = max(self.stats.max_running, self.running_batch.batch_size()
                                     + (batch.batch_size() if batch is not self.running_batch else 0))
        for i, (req, token) in enumerate(zip(batch.reqs, result.next_token_ids)):
            if req is self.chunked_req:
                continue  # mid-prompt: its sampled token means nothing yet
            if req.first_token_time is None:
                req.first_token_time = now
            if len(req.output_ids) < req.max_new_tokens:
                req.output_ids.append(token)
                if self.keep_logits:
                    req.output_logits.append(result.logits[i].clone())
            req.check_finished(self.eos_token_ids)
            if req.is_done():
                req.finished_time = now
                self.release(req)
            elif batch.forward_mode.is_extend():
                self.tree_cache.cache_unfinished_req(req)  # others may share the prompt from now on

    def release(self, req: Req) -> None:
        """The request is done: the tree adopts its KV, the lock and the row go back (notebook 05's ``release``)."""
        release(req, self.tree_cache)

    # -- the loop ---------------------------------------------------------------------------------

    def event_loop_normal(self) -> None:
        """schedule → run → process until every request has finished."""
        while self.has_work():
            batch = self.get_next_batch_to_run()
            if batch is None:
                raise RuntimeError("scheduler stalled: requests wait but nothing can run (a bug)")
            result = self.run_batch(batch)
            self.process_batch_result(batch, result)
        self.last_batch = None

    def live_reqs(self) -> list[Req]:
        """Every request the scheduler holds, wherever it is (each once): what ``abort_all`` drops."""
        reqs = self.running_batch.reqs + self.waiting_queue + self._admitting \
            + ([self.chunked_req] if self.chunked_req else []) + (self.last_batch.reqs if self.last_batch is not None else [])
        return list({id(r): r for r in reqs}.values())

    def flush_cache(self) -> None:
        """Empty the cache, the allocator and the rows (SGLang: ``Scheduler.flush_cache``)."""
        self.tree_cache.reset()
        self.token_to_kv_pool_allocator.clear()
        self.req_to_token_pool.clear()

    def abort_all(self) -> None:
        """Drop every request (after an error mid-run): KV goes back, no lock or row stays taken."""
        for req in self.live_reqs():
            if req.req_pool_idx is not None:
                self.tree_cache.cache_finished_req(req, is_insert=False)
                self.req_to_token_pool.free(req.req_pool_idx)
                req.req_pool_idx = None
            req.finished_reason = req.finished_reason or "abort"
        self.waiting_queue, self.chunked_req, self.last_batch, self._admitting = [], None, None, []
        self.running_batch = ScheduleBatch([], self.tree_cache)
        if self.tree_cache.caches_on_alloc:
            self.flush_cache()  # blocks cached at allocation may never have been computed
