"""Instructor answer of exercise 09.1 (never imported by a notebook: the student edition cannot see it).

The grader computes 09.1's expected values from it, in its own process.
"""

from __future__ import annotations

from typing import Any, Sequence

CHECK_THRESHOLD = 32  # SGLang's IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD
DEPRIORITIZE_THRESHOLD = 32  # SGLang's IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD


def reference_lpm_order(waiting: Sequence[Sequence], tree: Any) -> tuple[list, set]:
    """SGLang's ``_compute_prefix_matches`` then ``_sort_by_longest_prefix``, on (rid, token ids) pairs.

    Every request is matched against the cache; one with at most 32 cached tokens is matched against a
    scratch tree of the waiting queue: 32 or more shared with an earlier waiting request -> deprioritized,
    otherwise its tokens go into the scratch tree. Then one stable sort, the deprioritized keyed ``inf``."""
    from ..mem_cache import RadixCache, RadixKey

    scratch = RadixCache()
    cached: dict = {}
    held: set = set()
    for rid, ids in waiting:
        key = RadixKey(list(ids))
        cached[rid] = len(tree.match_prefix(key))
        if cached[rid] <= CHECK_THRESHOLD:
            if len(scratch.match_prefix(key)) >= DEPRIORITIZE_THRESHOLD:
                held.add(rid)
            else:
                scratch.insert(key)
    ranked = sorted(waiting, key=lambda w: float("inf") if w[0] in held else -cached[w[0]])
    return [w[0] for w in ranked], held
