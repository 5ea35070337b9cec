"""Instructor answer of exercise 06.1.

Never imported by a notebook or by the grader's executor process (``runner.py`` refuses the import
there): the grader computes the expected values from it in its own process.
"""

from __future__ import annotations

from ..mem_cache import RadixCache


def reference_evict_loop(cache: RadixCache, heap: list, num_tokens: int) -> int:
    """The loop of ``RadixCache.evict`` (what the exercise asks for): ``RadixCache._evict_from_heap``."""
    return cache._evict_from_heap(heap, num_tokens)
