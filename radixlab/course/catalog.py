"""The course map: every notebook, in order, with what it teaches and which seed it comes from.

A test keeps this list and ``notebooks/`` in step, so notebook 00's map is never stale.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lesson:
    notebook: str
    title: str
    minutes: int
    teaches: str
    seed: str


COURSE = [
    Lesson("00_welcome", "Welcome: how the course works, and why prefix caching matters", 10,
           "prefill cost vs prompt length; a shared system prompt served with and without a cache", "both"),
    Lesson("01_radix_tree", "The radix tree", 20,
           "trie vs radix tree (Q1), insert and match_prefix step by step, requests A and B", "adv05"),
    Lesson("02_cow_split", "Copy-on-write split and ref counts", 20,
           "_split as a CoW fork, ref=2 on the shared node, the wrong-order bug (Q3), exercise: the split", "adv05"),
    Lesson("03_hash_vs_radix", "Hash chains vs the radix tree", 20,
           "the step13 chained-hash cache, lookup cost 1k–32k tokens, block granularity, when to use which", "adv05 + lesson 4"),
    Lesson("04_pages_and_namespaces", "Pages and namespaces", 25,
           "page alignment, extra_key namespaces, EAGLE bigrams, exercise: longest_cached_prefix (Q1, Q2)", "lesson 4"),
    Lesson("05_locks_and_eviction", "Lock references, eviction and the request lifecycle", 25,
           "lock_ref, evictable vs protected, heap eviction, cache_finished_req, LRU vs Belady", "lesson 4 + adv05 Q2"),
    Lesson("09_scheduling_and_serving", "Cache-aware scheduling and serving", 25,
           "fcfs vs lpm vs dfs-weight, DFS optimality, LPM fallback, in-batch check, exercise: the LPM order, "
           "bench serve", "lesson 4"),
    Lesson("10_timing_side_channel", "The prefix cache as a timing side channel", 15,
           "TTFT attack, guess accuracy and ROC AUC, per-tenant extra_key salts, trusted-layer salts", "lesson 4"),
]


def course_map() -> str:
    """The map as a text table (notebook 00 prints it)."""
    rows = [f"{l.notebook:<26} {l.minutes:>3} min  {l.title}\n{'':<33}{l.teaches}" for l in COURSE]
    return "\n".join(rows)
