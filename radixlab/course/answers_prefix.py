"""Instructor answer of exercise 04.1 (never imported by a notebook: the student edition cannot see it).

The grader computes 04.1's expected values from it, in its own process.
"""

from __future__ import annotations

from typing import Hashable, Sequence

from ..tree import common_prefix_len


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


# -- what a wrong answer did: the check's messages name the mistake (grader side only) ---------------


def _scan(query, namespace, paths, page_size, align, *, any_namespace=False) -> int | str:
    """The lesson's scan with ``align(common, page_size)`` in the blank (what each mistake computes)."""
    if page_size <= 0:
        return "ValueError"
    return max([align(common_prefix_len(query, t), page_size) for t, n in paths if any_namespace or n == namespace],
               default=0)


def _floor(c: int, p: int) -> int:
    return c // p * p


ALIGN = (  # name, what that blank computes from the common length, what the message says
    ("floor", _floor, ""),
    ("raw match", lambda c, p: c,
     "you returned the raw match, without rounding to pages: KV is reused a whole page at a time"),
    ("ceil", lambda c, p: -(-c // p) * p,
     "you rounded up to a whole page: the last page is then only partly matched, and a partly matched page "
     "cannot be reused"),
    ("round", lambda c, p: round(c / p) * p,
     "you rounded to the nearest page: a page more than half matched is still not completely matched, and only "
     "complete pages can be reused"),
    ("one page short", lambda c, p: max(_floor(c, p) - p, 0),
     "one page short: you dropped a page that lies completely inside the match; every such page is reused"),
)
OTHER_NAMESPACE = ("you reused a path cached under another namespace: only paths whose namespace equals "
                   "query_namespace count (equal tokens under another extra_key are another model's KV)")


def _mistakes():
    """Every wrong blank, alone or with the namespace ignored: (what it answers on one call, message)."""
    for any_ns in (False, True):
        for _, align, message in ALIGN:
            if any_ns or message:
                said = "; and ".join(m for m in (OTHER_NAMESPACE if any_ns else "", message) if m)
                yield (lambda q, ns, paths, p, a=align, x=any_ns: _scan(q, ns, paths, p, a, any_namespace=x)), said


def diagnose(calls: list, got: list, want: list) -> str:
    """The mistake whose answers equal ``got`` on every call of this case, in words.

    ``calls`` are the case's ``[query, namespace, cached_paths, page_size]``. A mistake is named only
    when it gives the student's answer on every call (a case has several, the random one 200), so a
    message never blames a mistake that was not made; the message names the mistake, never the line
    that fixes it. Otherwise: a general hint from the first wrong answer's direction.
    """
    wrong = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    if not wrong or len(got) != len(calls):
        return ""
    first = wrong[0]
    p, g, w = calls[first][3], got[first], want[first]
    if w == "ValueError":
        return f"a page_size of {p} must raise ValueError: a page holds at least one token"
    if isinstance(g, str) and g != "ValueError":
        return "return an int: the number of cached tokens the query may reuse"
    if g == "ValueError":
        return f"page_size={p} is valid (a positive page size): raise ValueError only for page_size <= 0"
    for answer, message in _mistakes():
        if all(answer(*call) == g for call, g in zip(calls, got)):
            return message
    if g > w:
        return "that counts tokens the query may not reuse: only whole pages, of a path in the query's namespace"
    return ("that misses reusable tokens: the longest match over all the namespace's paths counts, "
            "every whole page of it")
