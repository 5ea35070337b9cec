"""The scheduler: a waiting queue, a running batch, and SGLang's two event loops (notebooks 07, 08).

Mirrors ``sglang/srt/managers/scheduler.py``: ``get_next_batch_to_run`` (merge the last prefill into
the running batch, build a prefill batch of waiting requests that fit, else decode the running batch)
→ ``run_batch`` (launch on the device backend) → ``process_batch_result`` (append tokens, finish
requests, let the tree adopt their KV). ``event_loop_normal`` and ``event_loop_overlap`` come from
``event_loop.py``. Decode slots are allocated from ``Req.kv_allocated_len`` and a decode input may be a
future, so batch N+1 can be scheduled before N's tokens are seen. Differences from SGLang, on purpose:
admission reserves all the KV a request can need, so nothing is retracted; a cache that caches blocks
at allocation (vLLM's) gets them at admission, so later requests of the same batch hit them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..mem_cache import admit, release
from .backends import InProcessBackend
from .event_loop import EventLoopMixin
from .schedule_batch import Req, ScheduleBatch, alloc_slots
from .schedule_policy import AddReqResult, PrefillAdder, SchedulePolicy

if TYPE_CHECKING:
    from .device_backend import DeviceBackend, Launch
    from .model_runner import ModelRunner


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


class Scheduler(EventLoopMixin):
    """Decides what runs next and keeps every request's KV accounted for; runs on ``backend``
    (default: ``InProcessBackend(model_runner)``, the model in this process)."""

    def __init__(self, model_runner: ModelRunner, tree_cache: Any, policy: SchedulePolicy, *,
                 max_running_requests: int, chunked_prefill_size: int | None, max_prefill_tokens: int,
                 eos_token_ids: frozenset = frozenset(), keep_logits: bool = False,
                 backend: DeviceBackend | None = None, war_barrier: bool | str = True) -> None:
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
        self.backend = backend if backend is not None else InProcessBackend(model_runner, device=model_runner.device)
        self.war_barrier = war_barrier
        self.waiting_queue: list[Req] = []
        self.running_batch = ScheduleBatch([], tree_cache)
        self.chunked_req: Req | None = None  # the request in the middle of a chunked prefill
        self._admitting: list[Req] = []  # the prefill batch being built (abort_all must see it too)
        self.last_batch: ScheduleBatch | None = None
        self.stats = SchedulerStats()
        self._step = 0  # launches so far: each launch's step number

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
            self.running_batch.merge_batch(self.last_batch, exclude=self.chunked_req)
        self.running_batch.filter_batch()
        # 3. Prefill first when anything waiting fits; otherwise decode the running batch.
        batch = self.get_new_batch_prefill()
        if batch is None and not self.running_batch.is_empty():
            batch = self.get_new_batch_decode()
        self.last_batch = batch
        return batch

    def get_new_batch_decode(self) -> ScheduleBatch | None:
        """A decode batch of the running requests that still need a token (counting launched steps)."""
        reqs = [r for r in self.running_batch.reqs if len(r.output_ids) + r.steps_in_flight < r.max_new_tokens]
        if not reqs:
            return None
        batch = ScheduleBatch(reqs, self.tree_cache)
        batch.prepare_for_decode()
        self.stats.evicted_tokens += batch.evicted_tokens
        return batch

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
        held_back = self.policy.deprioritized if self.policy.hold_back else ()
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
        _, evicted = alloc_slots(req, self.tree_cache, req.extend_input_len)
        req.preallocated = True
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

    def run_batch(self, batch: ScheduleBatch) -> Launch:
        """Launch ``batch`` on the device backend; its tokens come back through ``Launch.result()``."""
        for r, mid in zip(batch.reqs, batch.mid_chunk):
            r.steps_in_flight += not mid  # a mid-prompt chunk's token is never used
        launch = self.backend.launch_batch(self._step, batch)
        self._step += 1
        launch.record.kind = batch.forward_mode.name.lower()
        for r in batch.reqs:
            r.launched = True
        return launch

    # -- 3. process -------------------------------------------------------------------------------

    def process_batch_result(self, batch: ScheduleBatch, launch: Launch) -> None:
        """Wait for the batch's tokens; append them, finish requests, let the tree adopt a prefill's KV."""
        tokens = launch.result().tolist()
        now = time.perf_counter()
        self._count(batch)
        for i, (req, token) in enumerate(zip(batch.reqs, tokens)):
            if batch.mid_chunk[i] or req.is_done():
                continue  # mid-prompt chunk; or stopped on EOS a step earlier (``release`` took this KV)
            req.steps_in_flight -= 1
            if batch.forward_mode.is_decode():
                req.fill_ids = req.all_ids[:batch.prefix_lens[i] + 1]  # this position's KV is computed
            if req.first_token_time is None:
                req.first_token_time = now
            if len(req.output_ids) < req.max_new_tokens:
                req.output_ids.append(token)
                if self.keep_logits:
                    req.output_logits.append(launch.extra["logits"][i].clone())
            req.check_finished(self.eos_token_ids)
            if req.is_done():
                req.finished_time = now
                self.release(req)
            elif batch.forward_mode.is_extend():
                self.tree_cache.cache_unfinished_req(req)  # others may share the prompt from now on

    def _count(self, batch: ScheduleBatch) -> None:
        if batch.forward_mode.is_extend():
            self.stats.extend_batches += 1
            self.stats.prefill_tokens += sum(len(t) for t in batch.new_token_ids)
        else:
            self.stats.decode_batches += 1
            self.stats.decode_tokens += batch.batch_size()
        running = {id(r) for r in self.running_batch.reqs + batch.reqs}
        self.stats.max_running = max(self.stats.max_running, len(running))

    def release(self, req: Req) -> None:
        """The request is done: the tree adopts its KV, the lock and the row go back (notebook 05's ``release``).

        Under overlap a request that stopped on EOS in step N−1 was launched again in step N. As in SGLang
        v0.5.17 (``kv_committed_len`` rises with ``kv_allocated_len`` at allocation), step N's slot holds
        committed KV, that of the EOS token: the tree caches it, or frees it with the unaligned tail."""
        req.fill_ids = req.all_ids[:max(req.seq_len, req.kv_allocated_len)]
        release(req, self.tree_cache)

    def on_idle(self) -> None:
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
        try:
            self.backend.synchronize()  # nothing in flight may write a slot freed below
        except Exception:
            pass
        for req in self.live_reqs():
            if req.req_pool_idx is not None:
                self._free_uncommitted(req)
                self.tree_cache.cache_finished_req(req, is_insert=False)
                self.req_to_token_pool.free(req.req_pool_idx)
                req.req_pool_idx = None
            req.finished_reason = req.finished_reason or "abort"
        self.waiting_queue, self.chunked_req, self.last_batch, self._admitting = [], None, None, []
        self.running_batch = ScheduleBatch([], self.tree_cache)
        if self.tree_cache.caches_on_alloc:
            self.flush_cache()  # blocks cached at allocation may never have been computed

    def _free_uncommitted(self, req: Req) -> None:
        """Free the pages of ``req``'s row past ``seq_len`` up to ``kv_allocated_len`` (launched steps
        whose tokens were never processed); a first partial page goes with the tail."""
        row = self.req_to_token_pool.req_to_token[req.req_pool_idx]
        pages = [int(row[p]) for p in range(req.seq_len, req.kv_allocated_len) if p % self.page_size == 0]
        if pages:
            self.token_to_kv_pool_allocator.free(pages)
        req.kv_allocated_len = req.seq_len
