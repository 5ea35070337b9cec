"""Does the order of service matter? A one-request-at-a-time simulator (notebook 09_scheduling_and_serving).

It checks the SGLang paper's claim (arXiv 2312.07104, Theorem 3.1: serving a batch in depth-first
order of its radix tree reaches the optimal hit rate when the cache holds the longest request) on
the real objects: ``serve_order`` runs requests one at a time through a ``FastRadixCache`` with
LRU eviction (``eviction_sim.serve_trace``); ``paper_dfs_order`` is the paper's order;
``best_order_brute_force`` tries every permutation with an unbounded cache; ``serve_with_policy``
lets a policy of ``radixlab.engine.schedule_policy`` pick each next request against the live tree. SGLang
has no such simulator: its scheduler orders a whole waiting queue each step (notebook 09 explains
why the two differ). The last prompt token is always computed, as in the engine.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Callable, Sequence

from ..engine.schedule_policy import POLICIES, SimRequest, order_queue
from ..mem_cache import (FastRadixCache, RadixCache, ReqToTokenPool, Request, TokenToKVPoolAllocator, admit, extend,
                         release)
from ..utils.checks import check_int
from .eviction_sim import serve_trace
from .workloads import TraceRequest, ideal_hit_rate


@dataclass(frozen=True)
class OrderResult:
    """One served order: which requests, in what order, and the hits they got."""

    order: tuple[int, ...]  # indices into the trace
    hit_tokens: int
    prompt_tokens: int
    hits: tuple[int, ...] = ()  # per served request, in service order

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def _check_capacity(trace: Sequence[TraceRequest], capacity: int) -> None:
    longest = max((len(r) for r in trace), default=0)
    if check_int(capacity, "capacity") < max(longest, 1):
        raise ValueError(f"capacity must be an int >= the longest request ({longest} tokens), got {capacity!r}")


def _new_cache(capacity: int, longest: int) -> RadixCache:
    return FastRadixCache(1, token_to_kv_pool_allocator=TokenToKVPoolAllocator(capacity, 1),
                      req_to_token_pool=ReqToTokenPool(1, max(longest, 1)))


def serve_order(trace: Sequence[TraceRequest], order: Sequence[int], capacity: int) -> OrderResult:
    """Serve ``trace[i]`` for i in ``order``, one at a time, through a real LRU radix cache of ``capacity`` slots."""
    _check_capacity(trace, capacity)
    if sorted(order) != list(range(len(trace))):
        raise ValueError(f"order must be a permutation of range({len(trace)}), got {list(order)!r}")
    cache = _new_cache(capacity, max(len(r) for r in trace))
    hits = []
    real_admit_prompt = 0
    for i in order:  # serve_trace's loop, one request at a time, to keep each request's hits
        h, p = serve_trace(cache, [trace[i]])
        hits.append(h)
        real_admit_prompt += p
    return OrderResult(tuple(order), sum(hits), real_admit_prompt, tuple(hits))


def paper_dfs_order(trace: Sequence[TraceRequest]) -> list[int]:
    """The paper's order: a depth-first walk of the trie of the prompts (per namespace).

    A request is served when the walk reaches the node where its prompt ends, *before* the walk
    descends below it (so a prompt that is a prefix of another is served first); children are
    visited in order of first appearance, so the order is deterministic.
    """
    roots: dict = {}
    for i, r in enumerate(trace):
        node = roots.setdefault(r.extra_key, [{}, []])
        for t in r.prompt_ids:
            node = node[0].setdefault(t, [{}, []])
        node[1].append(i)
    order: list[int] = []
    for root in roots.values():
        stack = [root]
        while stack:
            children, here = stack.pop()
            order.extend(here)
            stack.extend(reversed(list(children.values())))
    return order


def best_order_brute_force(trace: Sequence[TraceRequest], max_requests: int = 7) -> OrderResult:
    """The best hit rate over *every* order with an unbounded cache: an upper bound for any cache.

    Independent of ``RadixCache``: uses ``workloads.ideal_hit_rate`` (a dict trie). Factorial time,
    so at most ``max_requests`` requests.
    """
    n = len(trace)
    if n > max_requests:
        raise ValueError(f"trace must hold at most max_requests={max_requests} requests (n! orders), got {n}")
    prompt = sum(len(r.prompt_ids) for r in trace)
    best: OrderResult | None = None
    for perm in itertools.permutations(range(n)):
        hits = round(ideal_hit_rate([trace[i] for i in perm]) * prompt)
        if best is None or hits > best.hit_tokens:
            best = OrderResult(perm, hits, prompt)
    assert best is not None
    return best


def serve_with_policy(trace: Sequence[TraceRequest], policy: str, capacity: int, seed: int = 0,
                      in_batch_check: bool = False) -> OrderResult:
    """All of ``trace`` waits at once; at every step ``policy`` orders the queue against the live
    tree and the first request is served (admit, compute, release), one at a time."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    rng = random.Random(seed)
    return serve_dynamic(trace, capacity, lambda waiting, cache: order_queue(policy, waiting, cache, rng,
                                                                             in_batch_check).order[0])


def serve_dynamic(trace: Sequence[TraceRequest], capacity: int,
                  pick: Callable[[list[SimRequest], RadixCache], SimRequest]) -> OrderResult:
    """Serve all of ``trace`` one at a time; ``pick(waiting, cache)`` chooses the next request.

    ``waiting`` holds ``SimRequest``s (rid = index into the trace) in arrival order; ``cache`` is
    the live tree, which ``pick`` may match against.
    """
    _check_capacity(trace, capacity)
    cache = _new_cache(capacity, max(len(r) for r in trace))
    waiting = [SimRequest(i, r.prompt_ids, (), r.extra_key, max(len(r.output_ids), 1)) for i, r in enumerate(trace)]
    order, hits = [], []
    while waiting:
        # 1. The policy picks against the tree as it is now.
        nxt = pick(list(waiting), cache)
        if nxt not in waiting:
            raise ValueError(f"pick must return one of the waiting requests, got {nxt!r}")
        waiting.remove(nxt)
        # 2. Serve it whole: match + lock, compute prompt and output, hand the KV to the tree.
        item = trace[nxt.rid]
        req = Request(str(nxt.rid), list(item.prompt_ids), list(item.output_ids), extra_key=item.extra_key)
        hits.append(admit(req, cache))
        if not extend(req, cache, len(req.all_ids) - req.seq_len):
            raise RuntimeError(f"request {nxt.rid} does not fit in {capacity} slots")
        release(req, cache)
        order.append(nxt.rid)
    return OrderResult(tuple(order), sum(hits), sum(len(r.prompt_ids) for r in trace), tuple(hits))


def compare_orders(trace: Sequence[TraceRequest], capacity: int, policies: Sequence[str] = ("fcfs", "lpm", "dfs-weight"),
                   seed: int = 0) -> dict[str, OrderResult]:
    """Hit rate of each policy, plus the paper's DFS order, on one trace and one capacity."""
    out = {p: serve_with_policy(trace, p, capacity, seed) for p in policies}
    out["paper-dfs"] = serve_order(trace, paper_dfs_order(trace), capacity)
    return out


def service_frames(trace: Sequence[TraceRequest], policy: str, capacity: int, seed: int = 0,
                   labels: Sequence[str] | None = None) -> tuple[list[str], OrderResult]:
    """The stepper of notebook 09: before each request is served, the queue in the policy's order,
    the one served, its hit, and the tree as text. Returns (frames, result)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    rng = random.Random(seed)
    name = (lambda i: labels[i]) if labels is not None else str
    frames: list[str] = []

    def pick(waiting: list[SimRequest], cache: RadixCache) -> SimRequest:
        decision = order_queue(policy, waiting, cache, rng, in_batch_check=False)
        nxt = decision.order[0]
        hit = decision.prefix_len.get(nxt.rid)
        frames.append(f"step {len(frames) + 1} ({policy}): queue {' '.join(name(r.rid) for r in decision.order)}"
                      f"  → serve {name(nxt.rid)}" + (f" (cached prefix {hit})" if hit is not None else "")
                      + "\n" + cache.format())
        return nxt

    result = serve_dynamic(trace, capacity, pick)
    return frames, result
