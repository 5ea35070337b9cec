"""Who is admitted next, and whether they fit: the scheduling policy and the prefill budget (notebook 07).

Mirrors ``sglang/srt/managers/schedule_policy.py``:

* ``SchedulePolicy`` orders the waiting queue: ``fcfs`` (first come, first served), and through
  ``OrderingPolicy`` the orders of ``policies.py`` (``lpm``, ``dfs-weight``, ``lof``, ``random``).
* ``PrefillAdder`` builds one prefill (extend) batch: it takes requests in the policy's order while
  they fit in the token budget, and truncates one request into a chunk when ``chunked_prefill_size``
  is set.

The budget, as SGLang's ``rem_total_tokens``: free slots + evictable cached slots − what the requests
already in flight may still need. Choice that differs from SGLang, on purpose: SGLang reserves only
``new_token_ratio`` (< 1) of every running request's remaining ``max_new_tokens`` and *retracts* a
request when decode runs out of memory; radixlab reserves all of it (ratio 1), so a request admitted
always finishes and retraction is never needed. The price is fewer requests running at once.
"""

from __future__ import annotations

import random
from enum import Enum, auto
from typing import TYPE_CHECKING, Any

from ..mem_cache import RadixCache
from .policies import PolicyDecision, order_queue

if TYPE_CHECKING:
    from .schedule_batch import Req


def ceil_page(n: int, page_size: int) -> int:
    """``n`` rounded up to whole pages."""
    return -(-n // page_size) * page_size


class SchedulePolicy:
    """Orders the waiting queue before each prefill batch (SGLang: ``SchedulePolicy.calc_priority``).

    Subclass and register in ``POLICIES`` to add one; ``name`` is what ``Engine(schedule_policy=...)``
    will accept.
    """

    name = "base"

    def __init__(self, tree_cache: Any) -> None:
        self.tree_cache = tree_cache

    def calc_priority(self, waiting_queue: list[Req]) -> None:
        """Reorder ``waiting_queue`` in place (the first one is considered first)."""
        raise NotImplementedError


class FCFSPolicy(SchedulePolicy):
    """First come, first served: the queue stays in arrival order."""

    name = "fcfs"

    def calc_priority(self, waiting_queue: list[Req]) -> None:
        return None


class OrderingPolicy(SchedulePolicy):
    """``lpm``, ``dfs-weight``, ``lof``, ``random``: the orderings of ``policies.py`` (notebook 09).

    ``decision`` keeps the last step's ``PolicyDecision``; ``deprioritized`` (the in-batch prefix
    check's rids) sort last, and while ``hold_back`` is True (the engine's
    ``hold_back_deprioritized``) the scheduler also keeps them out of this prefill batch. A cache that is not a
    radix tree (no cache, the hash cache) makes a cache-aware policy serve FCFS, as in SGLang.
    """

    in_batch_check = True
    hold_back = True

    def __init__(self, tree_cache: Any, seed: int = 0) -> None:
        super().__init__(tree_cache)
        self.rng = random.Random(seed)
        self.decision: PolicyDecision | None = None

    @property
    def deprioritized(self) -> set:
        return self.decision.deprioritized if self.decision is not None else set()

    def calc_priority(self, waiting_queue: list[Req]) -> None:
        tree = self.tree_cache if isinstance(self.tree_cache, RadixCache) else None
        self.decision = order_queue(self.name, waiting_queue, tree, self.rng, self.in_batch_check)
        waiting_queue[:] = self.decision.order


POLICIES: dict[str, type[SchedulePolicy]] = {"fcfs": FCFSPolicy}
for _name in ("lpm", "dfs-weight", "lof", "random"):
    POLICIES[_name] = type(f"{_name.title().replace('-', '')}Policy", (OrderingPolicy,), {"name": _name})


class AddReqResult(Enum):
    CONTINUE = auto()  # added; try the next one
    NO_TOKEN = auto()  # not enough KV slots: stop, it waits for memory
    OTHER = auto()  # batch is full for another reason (rows, prefill token budget)


def remaining_kv_need(req: Req, page_size: int) -> int:
    """Slots ``req`` may still allocate before it finishes: its whole sequence, in pages, minus
    the pages its row already covers (tree pages or its own)."""
    total = len(req.origin_input_ids) + req.max_new_tokens
    return max(ceil_page(total, page_size) - ceil_page(req.seq_len, page_size), 0)


class PrefillAdder:
    """Fills one prefill batch under the KV budget, the prefill-token budget and the row limit."""

    def __init__(self, tree_cache: Any, allocator: Any, in_flight: list[Req], page_size: int,
                 rem_input_tokens: int, rem_chunk_tokens: int | None, rem_rows: int) -> None:
        self.tree_cache = tree_cache
        self.allocator = allocator
        self.page_size = page_size
        self.rem_input_tokens = rem_input_tokens
        self.rem_chunk_tokens = rem_chunk_tokens
        self.rem_rows = rem_rows
        # What requests already running (or mid-chunk) may still allocate.
        self.rem_total_token_offset = sum(remaining_kv_need(r, page_size) for r in in_flight)
        self.can_run_list: list[Req] = []
        self.new_chunked_req: Req | None = None

    @property
    def rem_total_tokens(self) -> int:
        """Free + evictable slots, minus what admitted requests may still need."""
        return (self.allocator.available_size() + self.tree_cache.evictable_size()
                - self.rem_total_token_offset)

    def _take(self, req: Req, extend_len: int) -> None:
        req.extend_input_len = extend_len
        self.can_run_list.append(req)
        self.rem_input_tokens -= extend_len
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= extend_len

    def allocated(self, req: Req, from_len: int) -> None:
        """``req``'s slots from ``from_len`` to its ``seq_len`` were allocated at admission: they count
        as taken, no longer as still to allocate."""
        self.rem_total_token_offset -= ceil_page(req.seq_len, self.page_size) - ceil_page(from_len, self.page_size)

    def add_chunked_req(self, req: Req) -> Req | None:
        """The request in the middle of a chunked prefill goes first; returns it if still unfinished."""
        left = len(req.origin_input_ids) - req.seq_len
        size = min(left, self.rem_chunk_tokens) if self.rem_chunk_tokens is not None else left
        if size < left:  # more chunks to come: keep chunk ends on page boundaries
            size = (req.seq_len + size) // self.page_size * self.page_size - req.seq_len
        if size <= 0:
            return req
        self._take(req, size)
        return req if size < left else None

    def add_one_req(self, req: Req, match_len: int, locked_evictable: int) -> AddReqResult:
        """Try to admit ``req`` whose cached prefix is ``match_len`` tokens.

        ``locked_evictable`` is how many evictable tokens locking that prefix would protect: they
        stop counting as evictable once ``req`` holds them.
        """
        if self.rem_rows <= 0:
            return AddReqResult.OTHER
        need = ceil_page(len(req.origin_input_ids) + req.max_new_tokens, self.page_size) - match_len
        if need > self.rem_total_tokens - locked_evictable:
            return AddReqResult.NO_TOKEN
        extend_len = len(req.origin_input_ids) - match_len
        if self.rem_chunk_tokens is None:
            # Without chunking the first request always goes; later ones while the budget lasts.
            if self.can_run_list and extend_len > self.rem_input_tokens:
                return AddReqResult.OTHER
        elif extend_len > self.rem_chunk_tokens:
            size = (match_len + self.rem_chunk_tokens) // self.page_size * self.page_size - match_len
            if size <= 0:
                return AddReqResult.OTHER
            self.new_chunked_req = req
            self.rem_total_token_offset += need
            self.rem_rows -= 1
            self._take(req, size)
            return AddReqResult.OTHER  # a chunk fills the batch
        self.rem_total_token_offset += need
        self.rem_rows -= 1
        self._take(req, extend_len)
        return AddReqResult.CONTINUE
