"""``python -m radixlab bench evict``: SGLang's eviction heap vs an LRU linked list, on the same trace.

Both caches are the real ``RadixCache`` driving the real request lifecycle (``admit`` → ``extend`` →
``release``) over one seeded workload at a fraction of its working set:

* **heap** (SGLang, ``RadixCache.evict``): accesses only write ``last_access_time``; each ``evict``
  call gathers the unlocked leaves, heapifies them and pops.
* **list** (``ListLRURadixCache`` below, the textbook design): an ordered dict of *all* nodes in
  recency order, every node after its descendants. Every match/insert re-links the nodes it touched
  (the hot path); ``evict`` scans from the least recent end, skipping locked and internal nodes.

Times are best-of-N in this process; the ratios are the result (notebook 06_eviction explains them).
"""

from __future__ import annotations

import argparse
import time
from collections import OrderedDict
from typing import Sequence

from ..sim.eviction_sim import capacity_grid, serve_trace
from ..mem_cache import FastRadixCache, RadixCache, RadixKey, ReqToTokenPool, TokenToKVPoolAllocator, TreeNode
from ..sim.workloads import WORKLOADS, TraceRequest


class ListLRURadixCache(FastRadixCache):
    """``RadixCache`` with LRU eviction from a recency list instead of a heap (the baseline)."""

    def reset(self) -> None:
        super().reset()
        self.lru: OrderedDict[TreeNode, None] = OrderedDict()  # least recently used first

    def _touch_path(self, node: TreeNode) -> None:
        # Leaf first, then up to the root: every node ends up after all its descendants.
        while node is not self.root_node:
            self.lru.pop(node, None)
            self.lru[node] = None
            node = node.parent

    def _match_prefix_helper(self, node: TreeNode, key: RadixKey):
        values, last = super()._match_prefix_helper(node, key)
        self._touch_path(last)
        return values, last

    def _insert_helper(self, node: TreeNode, key: RadixKey, value, priority: int = 0, chunked: bool = False):
        prefix_len, last = super()._insert_helper(node, key, value, priority, chunked)
        self._touch_path(last)
        return prefix_len, last

    def evict(self, num_tokens: int) -> int:
        # Scan from the least recent end. A node comes after its descendants, so by the time the
        # scan reaches a parent it knows whether all its children are going: then it is a leaf too.
        victims: list[TreeNode] = []
        going: set[int] = set()
        freed = 0
        for node in self.lru:
            if freed >= num_tokens:
                break
            if node.lock_ref == 0 and all(id(c) in going for c in node.children.values()):
                victims.append(node)
                going.add(id(node))
                freed += len(node.key)
        for node in victims:  # children before parents
            if self.token_to_kv_pool_allocator is not None:
                self.token_to_kv_pool_allocator.free(node.value)
            self._delete_leaf(node)
            del self.lru[node]
        return freed


def replay(trace: Sequence[TraceRequest], capacity: int, cache_cls: type[RadixCache]) -> tuple[float, float, int]:
    """Serve ``trace`` once: (total seconds, seconds inside evict, prompt tokens hit)."""
    longest = max(len(r) for r in trace)
    cache = cache_cls(token_to_kv_pool_allocator=TokenToKVPoolAllocator(capacity),
                      req_to_token_pool=ReqToTokenPool(1, longest))
    real_evict, in_evict = cache.evict, [0.0]

    def timed_evict(n: int) -> int:
        t0 = time.perf_counter()
        out = real_evict(n)
        in_evict[0] += time.perf_counter() - t0
        return out

    cache.evict = timed_evict  # type: ignore[method-assign]
    t0 = time.perf_counter()
    hits, _ = serve_trace(cache, trace)
    total = time.perf_counter() - t0
    cache.check_invariants()
    return total, in_evict[0], hits


def run(workload: str, num_requests: int, fraction: float, repeats: int, seed: int = 0) -> dict:
    kwargs = {"num_conversations": max(1, num_requests // 5)} if workload == "multi_turn_chat" else {"num_requests": num_requests}
    trace = WORKLOADS[workload](seed=seed, **kwargs)
    capacity = capacity_grid(trace, [fraction])[0]
    out: dict = {"workload": workload, "requests": len(trace), "capacity": capacity}
    for name, cls in (("heap", RadixCache), ("list", ListLRURadixCache)):
        runs = [replay(trace, capacity, cls) for _ in range(repeats)]
        best = min(runs, key=lambda r: r[0])
        out[name] = {"total_s": best[0], "evict_s": min(r[1] for r in runs), "hits": best[2]}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m radixlab bench evict", description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="shared_system_prompt")
    parser.add_argument("--requests", type=int, default=1000, help="requests in the trace (default 1000)")
    parser.add_argument("--fraction", type=float, default=0.3, help="capacity / working set (default 0.3)")
    parser.add_argument("--repeats", type=int, default=3, help="timed replays per design; best is kept")
    args = parser.parse_args(argv)
    if args.requests <= 0 or args.repeats <= 0 or not 0 < args.fraction <= 1:
        parser.error("--requests and --repeats must be positive, --fraction in (0, 1]")
    r = run(args.workload, args.requests, args.fraction, args.repeats)
    heap, lst = r["heap"], r["list"]
    print(f"evict: {r['workload']}, {r['requests']} requests, capacity {r['capacity']} slots "
          f"({args.fraction:.0%} of the working set), best of {args.repeats}")
    print(f"{'design':<6} {'replay':>10} {'in evict':>10} {'hit tokens':>11}")
    for name, row in (("heap", heap), ("list", lst)):
        print(f"{name:<6} {row['total_s'] * 1e3:>8.1f} ms {row['evict_s'] * 1e3:>7.1f} ms {row['hits']:>11}")
    print(f"list / heap: whole replay {lst['total_s'] / heap['total_s']:.2f}×, "
          f"time inside evict {lst['evict_s'] / max(heap['evict_s'], 1e-9):.2f}×")
    return 0
