"""Exercise 05.1 (notebook 05_locks_and_eviction): write the eviction loop of ``RadixCache.evict``.

The student writes ``evict_loop(cache, heap, num_tokens) -> evicted``: ``heap`` is already a
heapified list of ``(policy key, leaf)`` for every unlocked leaf. The loop pops the leaf the policy
likes least, frees its slots to ``cache.token_to_kv_pool_allocator``, deletes it with
``cache._delete_leaf(node)``, and pushes the parent when that just became an unlocked leaf (never
the root); it stops when ``num_tokens`` are freed or the heap is empty.

The check runs the student's loop and the reference loop on identical real caches (with an
allocator, lock refs from "live requests") and compares what was evicted, the tree, the allocator
and the invariants. Its scenarios catch the two classic bugs: forgetting the parent push, and
pushing a parent that a request still has locked.
"""

from __future__ import annotations

import heapq
from typing import Callable

import torch

from ..memory import TokenToKVPoolAllocator
from ..radix_cache import RadixCache, TreeNode
from .check import Case, CheckResult, expect_equal, own_code, run_check

EvictLoop = Callable[[RadixCache, list, int], int]


def initial_heap(cache: RadixCache) -> list[tuple]:
    """Every unlocked leaf with its policy key, heapified (the part of ``evict`` given to students)."""
    return cache._evictable_heap()


def reference_evict_loop(cache: RadixCache, heap: list, num_tokens: int) -> int:
    """The loop of ``RadixCache.evict`` (what the exercise asks for): ``RadixCache._evict_from_heap``."""
    return cache._evict_from_heap(heap, num_tokens)


def loop_with_parent_rule(push_parent: Callable[[TreeNode], bool]) -> EvictLoop:
    """The eviction loop with another rule for pushing the parent: how plausible wrong answers differ."""
    def loop(cache: RadixCache, heap: list, num_tokens: int) -> int:
        evicted = 0
        while evicted < num_tokens and heap:
            _, node = heapq.heappop(heap)
            cache.token_to_kv_pool_allocator.free(node.value)
            evicted += len(node.key)
            cache._delete_leaf(node)
            parent = node.parent
            if parent is not cache.root_node and push_parent(parent):
                heapq.heappush(heap, (cache._priority_fn(parent), parent))
        return evicted
    return loop


forgets_parent_loop = loop_with_parent_rule(lambda parent: False)
"""Plausible wrong answer 1: never pushes the parent, so chains are only trimmed at the tip."""

ignores_lock_loop = loop_with_parent_rule(lambda parent: not parent.children)
"""Plausible wrong answer 2: pushes the parent without asking whether a request holds it."""


# -- scenarios: each builds a fresh cache; the student's loop and the reference run on twins --------


def _cache(page_size: int = 1, policy: str = "lru") -> tuple[RadixCache, TokenToKVPoolAllocator]:
    alloc = TokenToKVPoolAllocator(64, page_size)
    return RadixCache(page_size, token_to_kv_pool_allocator=alloc, eviction_policy=policy), alloc


def _put(cache: RadixCache, alloc: TokenToKVPoolAllocator, tokens: list[int]) -> None:
    """Insert ``tokens`` the way a finished request does: new slots for the part the tree lacks."""
    cached = cache.match_prefix(tokens).device_indices  # the tree keeps its own slots for these
    cache.insert(tokens, torch.cat([cached, alloc.alloc(len(tokens) - len(cached))]))


def chain() -> RadixCache:
    """root → [1,2] → [3,4] → [5,6]: evicting everything needs two parent pushes."""
    cache, alloc = _cache()
    _put(cache, alloc, [1, 2, 3, 4])
    _put(cache, alloc, [1, 2, 3, 4, 5, 6])
    _put(cache, alloc, [1, 2])
    return cache


def locked_parent() -> RadixCache:
    """A live request holds [1,2,3,4]; its unlocked child [5,6] may go, the parent may not."""
    cache, alloc = _cache()
    _put(cache, alloc, [1, 2, 3, 4, 5, 6])
    _put(cache, alloc, [9, 9, 9])
    cache.inc_lock_ref(cache.match_prefix([1, 2, 3, 4]).last_node)  # splits [1..6] at 4, locks [1..4]
    return cache


def figure_4_1() -> RadixCache:
    """Lesson 4's figure: a shared [Hello, World] node with [How are you ?] and [Explain CU DA] below."""
    cache, alloc = _cache()
    for tokens in ([1, 2, 3, 4, 5, 6], [1, 2, 7, 8, 9], [20, 21, 22]):
        _put(cache, alloc, tokens)
    cache.match_prefix([1, 2, 7, 8, 9])  # touched again: [3, 4, 5, 6] is now the oldest leaf
    cache.match_prefix([20, 21, 22])  # touched last: the most recently used leaf
    return cache


def bushy(page_size: int = 1, policy: str = "lru") -> RadixCache:
    """Several branches, some locked, with a page size; touched in a known order."""
    cache, alloc = _cache(page_size, policy)
    p = page_size
    base = list(range(100, 100 + 2 * p))
    for tail in range(5):
        _put(cache, alloc, base + [tail] * (2 * p))
    _put(cache, alloc, base + [0] * (2 * p) + [7] * p)
    _put(cache, alloc, [50] * (3 * p))
    cache.match_prefix(base + [3] * (2 * p))
    cache.inc_lock_ref(cache.match_prefix(base + [1] * (2 * p)).last_node)
    return cache


def _locked_nodes(cache: RadixCache) -> list[TreeNode]:
    return [n for n in cache.nodes() if n.lock_ref > 0]


def _compare(loop: EvictLoop, build: Callable[[], RadixCache], num_tokens: int, what: str) -> None:
    mine, ref = build(), build()

    def shortcut(*args: object, **kwargs: object) -> int:
        raise AssertionError("write the loop yourself: cache.evict and cache._evict_from_heap would do it for you")

    mine.evict = mine._evict_from_heap = shortcut  # type: ignore[method-assign]
    locked = _locked_nodes(mine)
    evictable = mine.evictable_size()
    got = loop(mine, initial_heap(mine), num_tokens)
    want = reference_evict_loop(ref, initial_heap(ref), num_tokens)
    for node in locked:
        if node.evicted:
            raise AssertionError(f"{what}: node #{node.id} was evicted, but a live request holds it "
                                 f"(lock_ref={node.lock_ref}): only push a parent whose lock_ref is 0")
    if got is None:
        raise AssertionError(f"{what}: evict_loop must return how many tokens it evicted, got None")
    if got < min(num_tokens, evictable) and want > got:
        raise AssertionError(f"{what}: asked for {num_tokens} tokens, evicted only {got} although {evictable} "
                             "were evictable. When a leaf goes, its parent may just have become an unlocked "
                             "leaf: push it onto the heap")
    expect_equal(got, want, f"{what}: tokens evicted")
    try:
        mine.check_invariants()
    except AssertionError as exc:
        raise AssertionError(f"{what}: the tree is broken after your loop ({exc})") from None
    expect_equal(mine.format(), ref.format(), f"{what}: the tree after eviction")
    expect_equal(mine.token_to_kv_pool_allocator.available_size(), ref.token_to_kv_pool_allocator.available_size(),
                 f"{what}: free slots in the allocator (free each evicted node's value)")


def check_evict_loop(evict_loop: EvictLoop) -> CheckResult:
    """Check a student's ``evict_loop(cache, heap, num_tokens)`` (exercise 05.1)."""
    if not callable(evict_loop):
        raise TypeError(f"evict_loop must be a function evict_loop(cache, heap, num_tokens), got {type(evict_loop).__name__}")
    evict_loop = own_code(evict_loop, "evict_loop", reference_evict_loop)
    cases = [
        Case("figure 4-1: evict 3 tokens takes the least recently used leaf",
             lambda: _compare(evict_loop, figure_4_1, 3, "figure 4-1, evict(3)")),
        Case("a chain: evicting 6 tokens needs the parent pushes",
             lambda: _compare(evict_loop, chain, 6, "chain, evict(6)"), points=2),
        Case("a locked parent is never evicted",
             lambda: _compare(evict_loop, locked_parent, 100, "locked parent, evict(100)"), points=2),
        Case("a parent that still has children is not a leaf yet",
             lambda: _compare(evict_loop, figure_4_1, 5, "figure 4-1, evict(5)"), hidden=True),
        Case("stops as soon as enough is freed", lambda: _compare(evict_loop, figure_4_1, 1, "evict(1)"), hidden=True),
        Case("evict(0) frees nothing", lambda: _compare(evict_loop, chain, 0, "evict(0)"), hidden=True),
        Case("asks for more than is evictable: stops when the heap is empty",
             lambda: _compare(evict_loop, bushy, 1000, "bushy, evict(1000)"), hidden=True),
        Case("pages of 4 and the lfu policy",
             lambda: _compare(evict_loop, lambda: bushy(4, "lfu"), 20, "pages of 4, lfu, evict(20)"), hidden=True),
        Case("partial eviction follows the policy order",
             lambda: _compare(evict_loop, bushy, 5, "bushy, evict(5)"), hidden=True),
    ]
    return run_check("05.1", "the eviction loop", cases)
