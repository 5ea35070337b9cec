"""Exercise 04.1 (lesson 4's only fill-in-the-blank): page-aligned, namespace-aware longest prefix.

``longest_cached_prefix`` is the runnable meaning of ``RadixCache.match_prefix`` without the tree:
for every cached path in the query's namespace, count the common tokens, keep whole pages only,
return the best. Notebook 04_pages_and_namespaces holds the exercise; ``SPEC`` grades it: the
lesson's asserts (main path), and hidden cases with several paths per namespace, shared prefixes of
different lengths, the longest path not first, edge cases and random caches compared with the real
``RadixCache`` (boundary). The grader draws the hidden cases' tokens afresh on every run.

The instructor's answer, ``reference_longest_cached_prefix``, lives in
``radixlab.course.answers_prefix``, which no notebook imports; ``radix_longest_cached_prefix`` (the
same question asked of the real tree) is here for notebook 04's comparison, and naming it in an
answer makes the grader reject the answer.
"""

from __future__ import annotations

import copy
import random
from typing import Any, Callable, Hashable, Sequence

from .spec import CheckResult, ExerciseSpec, GradedCase, check_exercise

EXERCISE = "04.1"
TITLE = "longest_cached_prefix"

CachedPaths = Sequence[tuple[Sequence[int], Hashable]]

SEED_CACHE = [
    ([1, 2, 3, 4, 5, 9], "base"),
    ([1, 2, 3, 4, 6, 7, 8, 9], "adapter-A"),
]
"""The lesson's cache: two paths in two namespaces."""


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


def radix_longest_cached_prefix(query_tokens: Sequence[int], query_namespace: Hashable,
                                cached_paths: CachedPaths, page_size: int) -> int:
    """The same question answered by the real tree: insert every path, ``match_prefix`` the query."""
    from ..mem_cache import RadixCache, RadixKey

    cache = RadixCache(page_size=page_size)
    for tokens, namespace in cached_paths:
        cache.insert(RadixKey(list(tokens), namespace))
    return len(cache.match_prefix(RadixKey(list(query_tokens), query_namespace)))


# -- the spec ---------------------------------------------------------------------------------------


def drive(fn: Callable, args: dict) -> Any:
    """Call ``fn`` on each query of the case (fresh lists each time); plain answers, mutation noted."""
    answers = []
    for q, ns, paths, p in args["calls"]:
        query, paths = list(q), [(list(t), n) for t, n in paths]
        before = copy.deepcopy((query, paths))
        try:
            got = fn(query, ns, paths, p)
        except ValueError:
            got = "ValueError"
        if (query, paths) != before:
            return {"mutated": repr(paths)[:300], "call": [q, ns, p]}
        answers.append(got if isinstance(got, (int, str)) and not isinstance(got, bool) else repr(got)[:200])
    return answers


def compare(got: Any, want: list, args: dict) -> str | None:
    if isinstance(got, dict) and "mutated" in got:
        q, ns, p = got["call"]
        return (f"longest_cached_prefix({q}, {ns!r}, cached_paths, {p}) changed its arguments "
                f"(cached_paths became {got['mutated']}): a lookup must not modify the cache")
    for (q, ns, paths, p), g, w in zip(args["calls"], got, want):
        if g != w:
            cache = "the lesson's cache" if [list(x) for x in paths] == [list(x) for x in SEED_CACHE] else paths
            what = "raise ValueError" if w == "ValueError" else f"return {w}"
            did = "it raised ValueError" if g == "ValueError" else f"it returned {g}"
            from .answers_prefix import diagnose  # the grader's (or the check cell's) process, never the executor
            named = diagnose(args["calls"], got, want)
            return (f"longest_cached_prefix({q}, {ns!r}, {cache}, page_size={p}) should {what}; {did}"
                    + (f"\n   {named}." if named else ""))
    return None if got == want else "a different number of answers came back"


def _one(q: list, ns: str, p: int, paths: list | None = None) -> list:
    return [q, ns, [[list(t), n] for t, n in (SEED_CACHE if paths is None else paths)], p]


def several_paths(rng: random.Random) -> tuple[list, list[list]]:
    """Several paths per namespace, shared prefixes of different lengths, the longest one not first.

    Catches "first match wins", "last match overwrites" and "count equal positions" (a path that
    agrees again after its first difference).
    """
    t = rng.sample(range(10, 99), 12)
    query = t[:9]
    paths = [
        (t[:2] + [t[10]], "base"),                          # shares 2 tokens (first in base)
        (t[:3] + [t[11]] + t[4:9], "base"),                 # shares 3, then agrees again (count-equal trap)
        (t[:7] + [t[11]], "base"),                          # shares 7: the longest, in the middle
        (t[:9], "adapter-A"),                               # shares all 9, other namespace
        (t[:5] + [t[10]], "base"),                          # shares 5 (last in base)
    ]
    calls = [[query, "base", [[list(a), n] for a, n in paths], p] for p in (1, 2, 3, 4)]
    calls.append([query, "adapter-A", [[list(a), n] for a, n in paths], 4])
    return query, calls


NAMESPACES = ["base", "adapter-A", "adapter-B", "lora-1", "lora-2", "tenant-x", "tenant-y", "default"]


def relabel(case: GradedCase, tokens: dict, namespaces: dict) -> GradedCase:
    """``case`` with every token and namespace renamed (same shape, same answers' structure)."""
    calls = [[[tokens.get(x, x) for x in q], namespaces.get(ns, ns),
              [[[tokens.get(x, x) for x in t], namespaces.get(n, n)] for t, n in paths], p]
             for q, ns, paths, p in case.args["calls"]]
    return GradedCase(case.name + " (tokens and namespaces renamed)", {"calls": calls}, case.part, case.weight,
                      case.hidden)


def cases(seed: int = 0) -> list[GradedCase]:
    rng = random.Random(seed)
    _, several = several_paths(rng)
    short = _one([1, 2, 3], "base", 2)
    call = lambda *calls: {"calls": list(calls)}  # noqa: E731
    lesson = _lesson_cases(call, short)
    if seed:  # the grader's seeds rename the lesson's tokens and namespaces: a table of visible answers fails
        tokens = dict(zip(range(1, 10), rng.sample(range(10, 99), 9)))
        namespaces = dict(zip(["base", "adapter-A", "adapter-B"], rng.sample(NAMESPACES, 3)))
        lesson = [relabel(c, tokens, namespaces) for c in lesson]
    return lesson + [
        GradedCase("several paths per namespace: the longest shared prefix wins wherever it stands",
                   {"calls": several}, "boundary", weight=2),
        GradedCase("agrees with RadixCache.match_prefix on 200 random caches",
                   {"calls": [[q, ns, [[list(t), n] for t, n in paths], p]
                              for q, ns, paths, p in random_cases(200, seed=4 + seed)]}, "boundary", weight=2),
    ]


def _lesson_cases(call: Callable, short: list) -> list[GradedCase]:
    """The cases on the lesson's cache (the check cell's; a grader seed renames their tokens)."""
    return [
        # Main path: the lesson's three asserts and the lesson's "query shorter than the cache".
        GradedCase("lesson assert 1: 5 common tokens, page_size 4 → 4", call(_one([1, 2, 3, 4, 5, 8], "base", 4))),
        GradedCase("lesson assert 2: adapter-A, page_size 2 → 6", call(_one([1, 2, 3, 4, 6, 7], "adapter-A", 2))),
        GradedCase("lesson assert 3: unknown namespace adapter-B → 0 (the same query in base → 4)",
                   call(_one([1, 2, 3, 4], "adapter-B", 2), _one([1, 2, 3, 4], "base", 2))),
        GradedCase("query shorter than the cached path: 3 tokens, page_size 2 → 2", call(short)),
        # Boundary: hidden edge cases; each also asks for a non-zero answer that only the blanked line earns.
        GradedCase("page_size <= 0 raises ValueError; page_size 1 reuses the raw match",
                   call(_one([1, 2], "base", 0), _one([1, 2], "base", -4), _one([1, 2, 3, 4, 5, 8], "base", 1)), "boundary"),
        GradedCase("empty query → 0; a one-token query → 1", call(_one([], "base", 1), _one([1], "base", 1)), "boundary"),
        GradedCase("exact-length hit: the whole cached path, a multiple of the page",
                   call(_one([1, 2, 3, 4, 6, 7, 8, 9], "adapter-A", 4), _one([1, 2, 3, 4, 5, 9], "base", 3),
                        _one([1, 2, 3, 4, 5, 9], "base", 2)), "boundary"),
        GradedCase("page_size larger than any match → 0; equal to the match → all of it",
                   call(_one([1, 2, 3, 4, 6, 7, 8, 9], "adapter-A", 16), _one([1, 2, 3, 4, 6, 7, 8, 9], "adapter-A", 8)),
                   "boundary"),
    ]


def _reference(*args: Any) -> int:
    from .answers_prefix import reference_longest_cached_prefix
    return reference_longest_cached_prefix(*args)


SPEC = ExerciseSpec(
    id=EXERCISE, title=TITLE, function="longest_cached_prefix", check="check_longest_cached_prefix",
    reference=_reference, drive=drive, cases=cases, compare=compare,
    forbidden=("radixlab.*", "reference_longest_cached_prefix", "radix_longest_cached_prefix", "answers_prefix",
               "RadixCache", "RadixKey", "match_prefix", "page_aligned", "page_size_view"),
    answer_imports=("radixlab.tree",),  # lesson 01's common_prefix_len (the copy holds no radix_cache at all)
    strip=("radixlab.course.ex_prefix:radix_longest_cached_prefix", "radixlab.tree:RadixTree.match_prefix",
           "radixlab.tree:RadixTree.find"))
SPECS = [SPEC]


def check_longest_cached_prefix(fn: Callable, record: bool = True) -> CheckResult:
    """Grade exercise 04.1: the lesson's asserts, hidden edges, several paths, RadixCache agreement."""
    return check_exercise(SPEC, fn, record=record)
