"""How good is LRU? Replay a trace through the real cache and compare eviction policies (notebook 06_eviction).

``simulate`` drives the real objects (a ``FastRadixCache`` over a ``TokenToKVPoolAllocator`` of
``capacity`` slots and a ``ReqToTokenPool``), one request at a time: ``admit`` → ``extend`` (every
prompt and output token gets a slot; the cache evicts when the pool is short) → ``release``. The
hit rate is cached prompt tokens / prompt tokens. ``"belady"`` is the offline reference at the same
granularity (whole unlocked leaves, the real heap; only the victim order differs): a leaf's next
use is the next request whose prompt reaches its first page. SGLang offers the online policies
(``mem_cache/evict_policy.py``); Belady is radixlab's yardstick for them.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from ..mem_cache import (FastRadixCache, RadixCache, ReqToTokenPool, Request, TokenToKVPoolAllocator, TreeNode, admit,
                         extend, release)
from ..utils.checks import check_int
from .workloads import TraceRequest

POLICIES = ("lru", "lfu", "fifo", "belady")


@dataclass(frozen=True)
class SimResult:
    """Totals of one replay: the hit rate, and what eviction did."""

    policy: str
    capacity: int
    hit_tokens: int
    prompt_tokens: int
    evicted_tokens: int
    evict_calls: int

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


class NextUse:
    """Belady's oracle: for a cache node, the index of the next request whose prompt reaches it.

    A trie over the trace's (namespace, prompt prefix) positions, each holding the sorted indices of
    the requests that pass through it. ``now`` is the request being served; ``__call__`` is an
    eviction policy key (smallest evicted first), so it can be handed to ``RadixCache``.
    """

    def __init__(self, trace: Sequence[TraceRequest], page_size: int = 1) -> None:
        self.page_size = page_size
        self.now = -1
        self._roots: dict[Any, list] = {}
        for j, r in enumerate(trace):
            node = self._roots.setdefault(r.extra_key, [{}, []])
            usable = r.prompt_ids[:-1]  # what a match may hit (the last token is always computed)
            for t in usable[: len(usable) // page_size * page_size]:
                node = node[0].setdefault(t, [{}, []])
                node[1].append(j)

    def next_use(self, node: TreeNode) -> float:
        """Next request after ``now`` that needs ``node``'s first page (``math.inf`` if none)."""
        parts, walk = [], node.parent
        while walk is not None and walk.parent is not None:
            parts.append(walk.key.token_ids)
            walk = walk.parent
        path = [t for part in reversed(parts) for t in part] + list(node.key.token_ids[: self.page_size])
        trie = self._roots.get(node.key.extra_key)
        for t in path:
            if trie is None:
                return math.inf
            trie = trie[0].get(t)
        if trie is None:
            return math.inf
        uses = trie[1]
        i = bisect.bisect_right(uses, self.now)
        return uses[i] if i < len(uses) else math.inf

    def __call__(self, node: TreeNode) -> float:
        return -self.next_use(node)  # furthest next use = smallest key = evicted first


def simulate(trace: Sequence[TraceRequest], capacity: int, policy: str = "lru", page_size: int = 1,
             oracle: NextUse | None = None) -> SimResult:
    """Replay ``trace`` through a real RadixCache of ``capacity`` KV slots under ``policy``.

    ``oracle`` lets a sweep build Belady's ``NextUse`` index once per trace.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    longest = max((len(r) for r in trace), default=0)
    need = -(-longest // page_size) * page_size
    if check_int(capacity, "capacity") < need or capacity % page_size:
        raise ValueError(f"capacity must be a multiple of page_size={page_size} and >= {need} "
                         f"(the longest request), got {capacity!r}")
    if policy != "belady":
        oracle = None
    elif oracle is None or oracle.page_size != page_size:
        oracle = NextUse(trace, page_size)
    allocator = TokenToKVPoolAllocator(capacity, page_size)
    cache = FastRadixCache(page_size, token_to_kv_pool_allocator=allocator,
                       req_to_token_pool=ReqToTokenPool(1, max(need, 1)),
                       eviction_policy=oracle if oracle is not None else policy)
    evicted = calls = 0
    real_evict = cache.evict

    def counting_evict(num_tokens: int) -> int:
        nonlocal evicted, calls
        n = real_evict(num_tokens)
        evicted += n
        calls += 1
        return n

    cache.evict = counting_evict  # type: ignore[method-assign]
    hits, prompt = serve_trace(cache, trace, (lambda t: setattr(oracle, "now", t)) if oracle is not None else None)
    return SimResult(policy, capacity, hits, prompt, evicted, calls)


def serve_trace(cache: RadixCache, trace: Sequence[TraceRequest],
                before_request: Callable[[int], None] | None = None) -> tuple[int, int]:
    """Serve every request of ``trace`` in order (admit, compute it whole, release); returns
    (prompt tokens found in the cache, prompt tokens in all). Raises when one request cannot fit."""
    hits = prompt = 0
    for t, item in enumerate(trace):
        if before_request is not None:
            before_request(t)
        req = Request(str(t), list(item.prompt_ids), list(item.output_ids), extra_key=item.extra_key)
        hits += admit(req, cache)
        prompt += len(item.prompt_ids)
        if not extend(req, cache, len(req.all_ids) - req.seq_len):
            raise RuntimeError(f"request {t} ({len(req.all_ids)} tokens) does not fit in the KV pool even "
                               "after evicting everything unlocked")
        release(req, cache)
    return hits, prompt


def sweep(trace: Sequence[TraceRequest], capacities: Iterable[int], policies: Sequence[str] = POLICIES,
          page_size: int = 1, progress: bool = True, desc: str = "") -> dict[str, list[SimResult]]:
    """``simulate`` for every (policy, capacity): ``{policy: [result per capacity]}``."""
    capacities = list(capacities)
    jobs = [(p, c) for p in policies for c in capacities]
    if progress:
        from tqdm.auto import tqdm

        jobs = tqdm(jobs, desc=desc or "replays", leave=False)
    oracle = NextUse(trace, page_size) if "belady" in policies else None
    out: dict[str, list[SimResult]] = {p: [] for p in policies}
    for p, c in jobs:
        out[p].append(simulate(trace, c, p, page_size, oracle))
    return out


def capacity_grid(trace: Sequence[TraceRequest], fractions: Sequence[float], page_size: int = 1) -> list[int]:
    """Capacities as fractions of the trace's working set, rounded to pages, never below the longest request."""
    from .workloads import working_set_tokens

    ws = working_set_tokens(trace)
    floor = -(-max(len(r) for r in trace) // page_size) * page_size
    return [max(floor, int(f * ws) // page_size * page_size) for f in fractions]


def gap_table(results: dict[str, list[SimResult]], baseline: str = "lru", oracle: str = "belady") -> list[tuple]:
    """Rows (capacity, baseline hit rate, oracle hit rate, gap in percentage points)."""
    rows = []
    for b, o in zip(results[baseline], results[oracle]):
        rows.append((b.capacity, round(b.hit_rate, 3), round(o.hit_rate, 3), round(100 * (o.hit_rate - b.hit_rate), 1)))
    return rows


def bookkeeping_costs(trace: Sequence[TraceRequest], capacity: int, page_size: int = 1) -> dict[str, int]:
    """What keeping eviction order costs, counted on a real LRU replay (heap vs an LRU linked list).

    * ``node_touches``: timestamps written by match/insert. SGLang's heap needs nothing more; an
      LRU linked list would also unlink and re-append each of these nodes, on every request.
    * ``evict_calls``, ``heap_built`` (leaves heapified, summed over calls), ``heap_pops`` and
      ``parent_pushes``: the heap's work, paid only when the pool is short.
    """
    allocator = TokenToKVPoolAllocator(capacity, page_size)
    longest = -(-max(len(r) for r in trace) // page_size) * page_size
    cache = FastRadixCache(page_size, token_to_kv_pool_allocator=allocator,
                       req_to_token_pool=ReqToTokenPool(1, longest))
    costs = dict(requests=len(trace), node_touches=0, evict_calls=0, heap_built=0, heap_pops=0, parent_pushes=0)
    real_match, real_insert = cache._match_prefix_helper, cache._insert_helper
    real_loop, real_delete = cache._evict_from_heap, cache._delete_leaf

    def counting(helper: Callable) -> Callable:
        def run(*args: Any) -> Any:  # each helper ticks the clock once: its nodes carry the new tick
            out = helper(*args)
            costs["node_touches"] += sum(1 for n in cache.nodes() if n.last_access_time == cache._clock)
            return out
        return run

    match_helper, insert_helper = counting(real_match), counting(real_insert)

    def delete_leaf(node: Any) -> None:
        costs["heap_pops"] += 1
        real_delete(node)

    def evict_from_heap(heap: list, num_tokens: int) -> int:
        built, pops = len(heap), costs["heap_pops"]
        n = real_loop(heap, num_tokens)
        costs["evict_calls"] += 1
        costs["heap_built"] += built
        costs["parent_pushes"] += (costs["heap_pops"] - pops) + len(heap) - built  # what left = built + pushed
        return n

    cache._match_prefix_helper, cache._insert_helper = match_helper, insert_helper  # type: ignore[method-assign]
    cache._evict_from_heap, cache._delete_leaf = evict_from_heap, delete_leaf  # type: ignore[method-assign]
    serve_trace(cache, trace)
    return costs
