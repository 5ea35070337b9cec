"""Exercise 04.1 (lesson 4's only fill-in-the-blank): page-aligned, namespace-aware longest prefix.

``longest_cached_prefix`` is the runnable meaning of ``RadixCache.match_prefix`` without the tree:
for every cached path in the query's namespace, count the common tokens, keep whole pages only,
return the best. Notebook 04_pages_and_namespaces holds the exercise; ``check_longest_cached_prefix``
grades it with the rubric's code points (4): main path 2, edge cases 1, agreement with the real
``RadixCache`` (the source object it maps to) 1. That last case is tagged ``part="mapping"``: the
grader shows it as evidence for the rubric's mapping point, which an instructor marks by hand.
"""

from __future__ import annotations

import random
from typing import Callable, Hashable, Sequence

from ..radix_cache import RadixCache, RadixKey
from .check import Case, CheckResult, expect_equal, expect_raises, own_code, run_check

EXERCISE = "04.1"
TITLE = "longest_cached_prefix"

CachedPaths = Sequence[tuple[Sequence[int], Hashable]]

SEED_CACHE = [
    ([1, 2, 3, 4, 5, 9], "base"),
    ([1, 2, 3, 4, 6, 7, 8, 9], "adapter-A"),
]
"""The lesson's cache: two paths in two namespaces."""


def reference_longest_cached_prefix(query_tokens: Sequence[int], query_namespace: Hashable,
                                    cached_paths: CachedPaths, page_size: int) -> int:
    """The lesson's reference answer (instructor solution of exercise 04.1)."""
    if page_size <= 0:
        raise ValueError("page_size must be positive")
    best = 0
    for cached_tokens, cached_namespace in cached_paths:
        if cached_namespace != query_namespace:
            continue
        common = 0
        for left, right in zip(query_tokens, cached_tokens):
            if left != right:
                break
            common += 1
        aligned = common // page_size * page_size
        best = max(best, aligned)
    return best


def radix_longest_cached_prefix(query_tokens: Sequence[int], query_namespace: Hashable,
                                cached_paths: CachedPaths, page_size: int) -> int:
    """The same question answered by the real tree: insert every path, ``match_prefix`` the query."""
    cache = RadixCache(page_size=page_size)
    for tokens, namespace in cached_paths:
        cache.insert(RadixKey(list(tokens), namespace))
    return len(cache.match_prefix(RadixKey(list(query_tokens), query_namespace)))


def random_cases(n: int, seed: int = 0) -> list[tuple[list[int], str, list, int]]:
    """``n`` random (query, namespace, cached_paths, page_size) cases over a tiny alphabet.

    A tiny alphabet (tokens 1–3) and shared stems make long common prefixes, splits and
    namespace clashes common, which is where wrong answers show.
    """
    rng = random.Random(seed)
    namespaces = ["base", "adapter-A", "adapter-B"]
    cases = []
    for _ in range(n):
        stem = [rng.randint(1, 3) for _ in range(rng.randint(0, 12))]
        paths = []
        for _ in range(rng.randint(0, 4)):
            cut = rng.randint(0, len(stem))
            paths.append((stem[:cut] + [rng.randint(1, 3) for _ in range(rng.randint(0, 6))], rng.choice(namespaces)))
        cut = rng.randint(0, len(stem))
        query = stem[:cut] + [rng.randint(1, 3) for _ in range(rng.randint(0, 6))]
        cases.append((query, rng.choice(namespaces), paths, rng.randint(1, 8)))
    return cases


def _agrees_with_radix_cache(fn: Callable, n: int = 200) -> None:
    for query, ns, paths, page_size in random_cases(n, seed=4):
        want = radix_longest_cached_prefix(query, ns, paths, page_size)
        got = fn(query, ns, paths, page_size)
        if got != want:
            raise AssertionError(f"longest_cached_prefix({query}, {ns!r}, {paths}, page_size={page_size}) "
                                 f"returned {got!r}, but RadixCache.match_prefix finds {want}")


def check_longest_cached_prefix(fn: Callable, record: bool = True) -> CheckResult:
    """Grade exercise 04.1: the lesson's three asserts, a short query, hidden edges, RadixCache agreement."""
    cache = [(list(t), ns) for t, ns in SEED_CACHE]
    call = "longest_cached_prefix"
    fn = own_code(fn, call, reference_longest_cached_prefix, radix_longest_cached_prefix)

    def eq(args: tuple, want: int) -> Callable[[], None]:
        q, ns, paths, p = args
        return lambda: expect_equal(fn(q, ns, paths, p), want, f"{call}({q}, {ns!r}, cache, {p})")

    short = ([1, 2, 3], "base", cache, 2)          # query shorter than the cached path
    cases = [
        # Main path (2 points): the lesson's asserts and the lesson's "query shorter than the cache".
        Case("lesson assert 1: 5 common tokens, page_size 4 → 4", eq(([1, 2, 3, 4, 5, 8], "base", cache, 4), 4), 0.5),
        Case("lesson assert 2: adapter-A, page_size 2 → 6", eq(([1, 2, 3, 4, 6, 7], "adapter-A", cache, 2), 6), 0.5),
        Case("lesson assert 3: unknown namespace adapter-B → 0", eq(([1, 2, 3, 4], "adapter-B", cache, 2), 0), 0.5),
        Case("query shorter than the cached path: 3 tokens, page_size 2 → 2", eq(short, 2), 0.5),
        # Edge cases (1 point), hidden.
        # Each also asks for a non-zero answer, so that only the blanked line can earn it.
        Case("page_size <= 0 raises ValueError; page_size 1 reuses the raw match",
             lambda: (expect_raises(ValueError, lambda: fn([1, 2], "base", cache, 0), f"{call}(..., page_size=0)"),
                      expect_raises(ValueError, lambda: fn([1, 2], "base", cache, -4), f"{call}(..., page_size=-4)"),
                      eq(([1, 2, 3, 4, 5, 8], "base", cache, 1), 5)()),
             0.25, hidden=True),
        Case("empty query → 0; a one-token query → 1",
             lambda: (eq(([], "base", cache, 1), 0)(), eq(([1], "base", cache, 1), 1)()), 0.25, hidden=True),
        Case("exact-length hit: the whole cached path, a multiple of the page",
             lambda: (eq(([1, 2, 3, 4, 6, 7, 8, 9], "adapter-A", cache, 4), 8)(),
                      eq(([1, 2, 3, 4, 5, 9], "base", cache, 3), 6)(),
                      eq(([1, 2, 3, 4, 5, 9], "base", cache, 2), 6)()),
             0.25, hidden=True),
        Case("page_size larger than any match → 0; equal to the match → all of it",
             lambda: (eq(([1, 2, 3, 4, 6, 7, 8, 9], "adapter-A", cache, 16), 0)(),
                      eq(([1, 2, 3, 4, 6, 7, 8, 9], "adapter-A", cache, 8), 8)()),
             0.25, hidden=True),
        # Maps back to the source object (1 point): same answers as RadixCache.match_prefix.
        Case("agrees with RadixCache.match_prefix on 200 random caches", lambda: _agrees_with_radix_cache(fn),
             1.0, hidden=True, part="mapping"),
    ]
    return run_check(EXERCISE, TITLE, cases, record=record)
