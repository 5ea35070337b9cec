"""Exercise 06.1 (notebook 06_eviction): write the eviction loop of ``RadixCache.evict``.

The student writes ``evict_loop(cache, heap, num_tokens) -> evicted``: ``heap`` is already a
heapified list of ``(policy key, leaf)`` for every unlocked leaf. The loop pops the leaf the policy
likes least, frees its slots to ``cache.token_to_kv_pool_allocator``, deletes it with
``cache._delete_leaf(node)``, and pushes the parent when that just became an unlocked leaf (never
the root); it stops when ``num_tokens`` are freed or the heap is empty.

``drive`` builds a real cache (with an allocator, lock refs from "live requests") for a named
scenario, runs a loop on it and returns what happened as plain data: the count it returned, the
tree before and after, the allocator's free slots, locked nodes evicted. The check cell and the
grader compare the student's run with the reference loop's run on an identical cache. Its scenarios
catch the two classic bugs: forgetting the parent push, and pushing a parent that a request still
has locked.
"""

from __future__ import annotations

import heapq
import random
from typing import Any, Callable

import torch

from ..mem_cache import RadixCache, TokenToKVPoolAllocator, TreeNode
from .spec import CheckResult, ExerciseSpec, GradedCase, check_exercise

EvictLoop = Callable[[RadixCache, list, int], int]


def initial_heap(cache: RadixCache) -> list[tuple]:
    """Every unlocked leaf with its policy key, heapified (the part of ``evict`` given to students).

    Built from the leaves in id order, so the heap's layout is the same in every process (the
    leaves are a set; its order changed between the check cell and the grader, and with it the
    score of an answer that pops the list's first entry instead of the heap's least)."""
    heap = [(cache._priority_fn(n), n) for n in sorted(cache.evictable_leaves_, key=lambda n: n.id)]
    heapq.heapify(heap)
    return heap


def reference_evict_loop(*args: Any) -> Any:
    """The instructor's answer, loaded on demand from ``answers_evict`` (absent from the executor process)."""
    from .answers_evict import reference_evict_loop as answer
    return answer(*args)


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


def child_key_parent_loop(cache: RadixCache, heap: list, num_tokens: int) -> int:
    """Plausible wrong answer 3: pushes the parent with the popped child's key, not its own."""
    evicted = 0
    while evicted < num_tokens and heap:
        key, node = heapq.heappop(heap)
        cache.token_to_kv_pool_allocator.free(node.value)
        evicted += len(node.key)
        cache._delete_leaf(node)
        parent = node.parent
        if parent is not cache.root_node and not parent.children and parent.lock_ref == 0:
            heapq.heappush(heap, (key, parent))
    return evicted


def fifo_parent_loop(cache: RadixCache, heap: list, num_tokens: int) -> int:
    """Plausible wrong answer 4: parents that became leaves wait in a list until the heap is empty."""
    evicted, later = 0, []
    while evicted < num_tokens and (heap or later):
        node = heapq.heappop(heap)[1] if heap else later.pop(0)
        cache.token_to_kv_pool_allocator.free(node.value)
        evicted += len(node.key)
        cache._delete_leaf(node)
        parent = node.parent
        if parent is not cache.root_node and not parent.children and parent.lock_ref == 0:
            later.append(parent)
    return evicted


# -- scenarios: each builds a fresh cache; the student's loop and the reference run on twins --------


def _cache(page_size: int = 1, policy: str = "lru") -> tuple[RadixCache, TokenToKVPoolAllocator]:
    alloc = TokenToKVPoolAllocator(64, page_size)
    return RadixCache(page_size, token_to_kv_pool_allocator=alloc, eviction_policy=policy), alloc


def _put(cache: RadixCache, alloc: TokenToKVPoolAllocator, tokens: list[int]) -> None:
    """Insert ``tokens`` the way a finished request does: new slots for the part the tree lacks."""
    cached = cache.match_prefix(tokens).device_indices  # the tree keeps its own slots for these
    cache.insert(tokens, torch.cat([cached, alloc.alloc(len(tokens) - len(cached))]))


def chain(off: int = 0) -> RadixCache:
    """root → [1,2] → [3,4] → [5,6]: evicting everything needs two parent pushes (tokens + ``off``)."""
    cache, alloc = _cache()
    _put(cache, alloc, [off + t for t in (1, 2, 3, 4)])
    _put(cache, alloc, [off + t for t in (1, 2, 3, 4, 5, 6)])
    _put(cache, alloc, [off + 1, off + 2])
    return cache


def locked_parent(off: int = 0) -> RadixCache:
    """A live request holds [1,2,3,4]; its unlocked child [5,6] may go, the parent may not (tokens + ``off``)."""
    cache, alloc = _cache()
    _put(cache, alloc, [off + t for t in (1, 2, 3, 4, 5, 6)])
    _put(cache, alloc, [off + 9] * 3)
    cache.inc_lock_ref(cache.match_prefix([off + t for t in (1, 2, 3, 4)]).last_node)  # splits at 4, locks [1..4]
    return cache


def three_requests(off: int = 0) -> RadixCache:
    """The engine lesson's three requests: a shared [Hello, World] node with [How are you ?] and [Explain CU DA] below
    (every token + ``off``: the grader's seeds rename them)."""
    cache, alloc = _cache()
    for tokens in ([1, 2, 3, 4, 5, 6], [1, 2, 7, 8, 9], [20, 21, 22]):
        _put(cache, alloc, [off + t for t in tokens])
    cache.match_prefix([off + t for t in (1, 2, 7, 8, 9)])  # touched again: [3, 4, 5, 6] is now the oldest leaf
    cache.match_prefix([off + t for t in (20, 21, 22)])  # touched last: the most recently used leaf
    return cache


def bushy(page_size: int = 1, policy: str = "lru", first: int = 100) -> RadixCache:
    """Several branches, some locked, with a page size; touched in a known order."""
    cache, alloc = _cache(page_size, policy)
    p = page_size
    base = list(range(first, first + 2 * p))
    for tail in range(5):
        _put(cache, alloc, base + [tail] * (2 * p))
    _put(cache, alloc, base + [0] * (2 * p) + [7] * p)
    _put(cache, alloc, [50] * (3 * p))
    cache.match_prefix(base + [3] * (2 * p))
    cache.inc_lock_ref(cache.match_prefix(base + [1] * (2 * p)).last_node)
    return cache


def parent_between(policy: str = "lru", off: int = 0) -> RadixCache:
    """A parent whose age lies between two leaves: P → X (the oldest leaf), L1 (older than P), L2
    (newest). Evicting X makes P a leaf that must go after L1 and before L2 (tokens + ``off``)."""
    cache, alloc = _cache(1, policy)
    p, x = [off + 1, off + 2], [off + 3, off + 4, off + 5]
    _put(cache, alloc, p + x)
    cache.match_prefix(p + [off + 99])  # splits the edge: P above X, X the oldest leaf
    _put(cache, alloc, [off + t for t in (20, 21, 22, 23)])  # L1
    cache.match_prefix(p + [off + 98])  # P alone touched: older than L2, newer than L1
    _put(cache, alloc, [off + 30] * 5)  # L2
    for _ in range(2 if policy == "lfu" else 0):
        cache.match_prefix([off + 30] * 5)
    return cache


SCENARIOS: dict[str, Callable[..., RadixCache]] = {"chain": chain, "locked_parent": locked_parent,
                                                  "three_requests": three_requests, "bushy": bushy,
                                                  "parent_between": parent_between}


def _tree(cache: RadixCache) -> list[list]:
    """Every live node as [id, parent id, tokens, slots, lock_ref], read attribute by attribute."""
    rows, stack = [], [cache.root_node]
    while stack:
        node = stack.pop()
        for child in sorted(dict(node.children).values(), key=lambda n: -n.id):
            slots = [] if child.value is None else [int(v) for v in child.value.tolist()]
            rows.append([child.id, node.id, list(child.key.token_ids), slots, int(child.lock_ref)])
            stack.append(child)
    return sorted(rows)


def drive(loop: EvictLoop, args: dict) -> dict:
    """Build the scenario, run ``loop(cache, heap, num_tokens)``, report what it did as plain data."""
    cache = SCENARIOS[args["scenario"]](**args.get("params", {}))

    def shortcut(*a: object, **k: object) -> int:
        raise AssertionError("write the loop yourself: cache.evict and cache._evict_from_heap would do it for you")

    before, locked = _tree(cache), [n.id for n in cache.nodes() if n.lock_ref > 0]
    evictable = cache.evictable_size()
    if loop is not globals().get("reference_evict_loop"):  # the grader's executor's copy has no reference,
        cache.evict = cache._evict_from_heap = shortcut  # type: ignore[method-assign]  # nor these two methods
    returned = loop(cache, initial_heap(cache), args["num_tokens"])
    after = _tree(cache)
    alloc = cache.token_to_kv_pool_allocator
    try:
        cache.check_invariants()
        broken = ""
    except AssertionError as exc:
        broken = str(exc)
    alive = {row[0] for row in after}
    return {"returned": returned if isinstance(returned, int) and not isinstance(returned, bool) else repr(returned),
            "before": before, "after": after, "free_slots": len(alloc.free_pages) * alloc.page_size,
            "locked_evicted": [i for i in locked if i not in alive], "evictable": evictable, "broken": broken}


def _describe(row: list) -> str:
    return f"node #{row[0]} {row[2]}"


def compare(got: dict, want: dict, args: dict) -> str | None:
    if got == want:
        return None
    what = f"{args['scenario']}, evict({args['num_tokens']})"
    if got["locked_evicted"]:
        return (f"{what}: node #{got['locked_evicted'][0]} was evicted, but a live request holds it "
                "(lock_ref > 0): only push a parent whose lock_ref is 0")
    if not isinstance(got["returned"], int):
        return f"{what}: evict_loop must return how many tokens it evicted, got {got['returned']}"
    if got["broken"]:
        return f"{what}: the tree is broken after your loop ({got['broken']})"
    gone_got = {r[0] for r in got["before"]} - {r[0] for r in got["after"]}
    gone_want = {r[0] for r in want["before"]} - {r[0] for r in want["after"]}
    if gone_got < gone_want:  # evicted too little
        had_children = {r[1] for r in got["before"]}
        stranded = [r for r in got["after"] if r[0] in gone_want and r[0] in had_children
                    and not any(c[1] == r[0] for c in got["after"]) and r[4] == 0]
        if stranded:
            return (f"{what}: evicted {got['returned']} tokens, the reference {want['returned']}. "
                    f"{_describe(stranded[0])} lost its children and became an unlocked leaf, but your loop never "
                    "evicted it: when a leaf goes, push its parent onto the heap if it just became an unlocked leaf")
        return (f"{what}: evicted {got['returned']} tokens, the reference {want['returned']} "
                f"({got['evictable']} were evictable); your loop stopped before the heap was empty or enough was freed")
    if gone_got != gone_want:
        extra = sorted(gone_got - gone_want)
        missing = sorted(gone_want - gone_got)
        parents = {r[1] for r in got["before"]}  # nodes that had children: pushed once they became leaves
        if any(e in parents for e in extra):
            return (f"{what}: evicted node #{[e for e in extra if e in parents][0]}, a parent your loop pushed, too "
                    f"early (expected {sorted(gone_want)}, got {sorted(gone_got)}): push the parent with its own "
                    "policy key, cache._priority_fn(parent), not the popped child's key")
        if any(m in parents for m in missing):
            return (f"{what}: node #{[m for m in missing if m in parents][0]} became a leaf older than a leaf you "
                    f"evicted, but your loop kept it (expected {sorted(gone_want)}, got {sorted(gone_got)}): push the "
                    "parent onto the heap, so it competes by its key, not after every leaf already there")
        return (f"{what}: evicted nodes {sorted(gone_got)}, expected {sorted(gone_want)}"
                + (f" (#{extra[0]} should have stayed" if extra else " (")
                + (f"; #{missing[0]} should have gone)" if missing else ")")
                + ": pop the policy's smallest key first and stop as soon as enough is freed")
    if got["returned"] != want["returned"]:
        return f"{what}: returned {got['returned']}, but the nodes evicted hold {want['returned']} tokens"
    if got["free_slots"] != want["free_slots"]:
        return (f"{what}: the allocator has {got['free_slots']} free slots, expected {want['free_slots']}: "
                "free each evicted node's value with cache.token_to_kv_pool_allocator.free(node.value)")
    return f"{what}: the tree after eviction differs from the reference"


def cases(seed: int = 0) -> list[GradedCase]:
    rng = random.Random(seed)
    first = 100 + (rng.randrange(50) if seed else 0)
    c = lambda scenario, n, **params: {"scenario": scenario, "num_tokens": n, "params": params}  # noqa: E731
    # the grader's seeds rename the visible scenarios' tokens: a table of the visible answers scores nothing
    off = {"off": 100 + rng.randrange(800)} if seed else {}
    return [
        GradedCase("the three requests: evict 3 tokens takes the least recently used leaf", c("three_requests", 3, **off)),
        GradedCase("a chain: evicting 6 tokens needs the parent pushes", c("chain", 6, **off), weight=2),
        GradedCase("a locked parent is never evicted", c("locked_parent", 100, **off), weight=2),
        GradedCase("a parent that still has children is not a leaf yet", c("three_requests", 5, **off), "boundary"),
        GradedCase("stops as soon as enough is freed", c("three_requests", 1, **off), "boundary"),
        GradedCase("a pushed parent goes before an older-keyed leaf only by the heap's order",
                   c("three_requests", 8, **off), "boundary"),
        GradedCase("evict(0) frees nothing", c("chain", 0, **off), "boundary"),
        GradedCase("asks for more than is evictable: stops when the heap is empty",
                   c("bushy", 1000, first=first), "boundary"),
        GradedCase("pages of 4 and the lfu policy", c("bushy", 20, page_size=4, policy="lfu", first=first), "boundary"),
        GradedCase("partial eviction follows the policy order", c("bushy", 4 + rng.randrange(3), first=first), "boundary"),
        *(GradedCase(f"{pol}: a pushed parent whose age lies between two leaves ({what})",
                     c("parent_between", n, policy=pol, **off), "boundary", 0.5)
          for pol in ("lru", "lfu") for n, what in ((4, "it goes after the older leaf"),
                                                     (8, "it goes before the newer leaf"))),
    ]


SPEC = ExerciseSpec(
    id="06.1", title="the eviction loop", function="evict_loop", check="check_evict_loop",
    reference=reference_evict_loop, drive=drive, cases=cases, compare=compare,
    forbidden=("evict", "_evict_from_heap", "reference_evict_loop", "loop_with_parent_rule",
               "forgets_parent_loop", "ignores_lock_loop"),
    strip=("radixlab.mem_cache.radix_cache:RadixCache.evict", "radixlab.mem_cache.radix_cache:RadixCache._evict_from_heap",
           # the interface's abstract evict too: left alone, RadixCache without evict could not be built
           "radixlab.mem_cache.base_prefix_cache:BasePrefixCache.evict",
           "radixlab.course.ex_evict:loop_with_parent_rule", "radixlab.course.ex_evict:forgets_parent_loop",
           "radixlab.course.ex_evict:ignores_lock_loop", "radixlab.course.ex_evict:fifo_parent_loop",
           "radixlab.course.ex_evict:child_key_parent_loop"))  # absent in the executor
SPECS = [SPEC]


def check_evict_loop(evict_loop: EvictLoop, *, record: bool = True) -> CheckResult:
    """Check a student's ``evict_loop(cache, heap, num_tokens)`` (exercise 06.1)."""
    return check_exercise(SPEC, evict_loop, record=record)
