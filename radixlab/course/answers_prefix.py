"""Instructor answer of exercise 04.1 (never imported by a notebook: the student edition cannot see it).

The grader computes 04.1's expected values from it, in its own process.
"""

from __future__ import annotations

from typing import Hashable, Sequence


def reference_longest_cached_prefix(query_tokens: Sequence[int], query_namespace: Hashable,
                                    cached_paths: Sequence[tuple[Sequence[int], Hashable]], page_size: int) -> int:
    """The lesson's reference answer: scan every path of the namespace, keep whole pages, take the best."""
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


def reference_test_shorter_query(longest_cached_prefix) -> None:
    """Exercise 04.2's answer: a query that ends inside a cached path, mid-page, has an exact answer."""
    cache = [([1, 2, 3, 4, 5, 9], "base")]
    assert longest_cached_prefix([1, 2, 3], "base", cache, 2) == 2  # 3 tokens match; one whole page of 2
    assert longest_cached_prefix([1, 2, 3], "base", cache, 4) == 0  # no whole page inside the query
