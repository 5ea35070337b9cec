"""The course map: every notebook, in order, with what it teaches and which of the two source lessons
(the tree lesson, the engine lesson, or both) it comes from.

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
    source: str  # "tree lesson", "engine lesson" or "both"


COURSE = [
    Lesson("00_welcome", "Welcome: how the course works, and why prefix caching matters", 20,
           "prefill cost vs prompt length (predict, then measure); a shared system prompt served with and without "
           "a cache", "both"),
    Lesson("01_radix_tree", "The radix tree", 37,
           "trie vs radix tree (Q1), insert and match_prefix step by step, exercise: match_prefix, the same requests "
           "in SGLang's RadixCache; Going further: insert's listing, the replay on a slider, the tree lesson's walkthrough, optional "
           "exercise: the match in SGLang's semantics", "tree lesson"),
    Lesson("02_cow_split", "Copy-on-write split and ref counts", 39,
           "_split as a CoW fork, ref=2 on the shared node, exercise: the teaching tree's split, SGLang's direction, "
           "the wrong-order bug (Q3), ref vs lock_ref (req.last_node and its lock); Going further: how ref moves, "
           "why clone, optional exercise: SGLang's _split_node", "tree lesson"),
    Lesson("03_hash_vs_radix", "Hash chains vs the radix tree", 32,
           "chained block hashes, lookup cost 1k–32k (re-hashing, vLLM's kept hashes, radix), exercise: the kept-hash "
           "probe, granularity, when to use which; Going further: the per-request cost, probe-down's worst case, the "
           "flat table vs the tree's branches (who shares what), vLLM's and SGLang's hash internals",
           "both"),
    Lesson("04_pages_and_namespaces", "Pages and namespaces", 47,
           "page alignment, exercises: longest_cached_prefix and its shorter-query test, extra_key namespaces (Q2), "
           "PagedAttention (Q1); Going further: page sizes compared, the scan against RadixCache, EAGLE bigrams",
           "engine lesson"),
    Lesson("05_request_lifecycle_and_locks", "The request lifecycle and lock references", 37,
           "who owns each KV slot, match → lock → alloc → decode → insert → unlock, the last prompt token, exercise: "
           "the hand-over of cache_finished_req, lock_ref vs ref; Going further: chunked prefill, why SGLang inserts "
           "twice, the engine lesson's lock picture",
           "engine lesson"),
    Lesson("06_eviction", "Eviction: the heap and its policies", 37,
           "evict and the parent push, exercise: the eviction loop from evict's contract, the tree lesson's Q2; "
           "Going further: LRU/LFU/FIFO vs Belady on seven workloads, heap vs LRU list counted and timed, where "
           "SGLang keeps lists",
           "both"),
    Lesson("07_kv_memory_pool", "The KV memory pool: real K/V, a real model, a small serving engine", 40,
           "node → row → slot → K/V row and its write side, SmolLM2 with and without the cache, adapters, half pages, "
           "page size, exercise: the gather; Going further: optional exercise: the write side, KV bytes per token",
           "engine lesson"),
    Lesson("08_overlap_scheduling", "Overlap scheduling and the write-after-read barrier", 44,
           "event_loop_normal vs event_loop_overlap on timelines, future token ids, exercise: place the barrier, "
           "no barrier / full wait / read barrier on one device, the engine lesson's Q3; Going further: thread vs "
           "process (the GIL inside the device step), SGLang's barrier, when overlap does not help", "engine lesson"),
    Lesson("09_scheduling_and_serving", "Cache-aware scheduling and serving", 37,
           "fcfs vs lpm vs dfs-weight, DFS optimality (checked on 20 queues), LPM fallback, in-batch check, "
           "exercise: the LPM order with the in-batch check, bench serve (prefill batches, held back, the table's "
           "columns defined); Going further: every step on a slider, online LPM on a bigger queue, the cost of "
           "LPM's matching, output length as medians, policies in a small pool, eviction vs order", "engine lesson"),
    Lesson("10_timing_side_channel", "The prefix cache as a timing side channel", 30,
           "TTFT attack, guess accuracy and ROC AUC, cached_tokens as an oracle, per-tenant extra_key salts, "
           "exercise: the salt a trusted layer sets; Going further: the published attack, what else belongs in "
           "the namespace", "engine lesson"),
    Lesson("11_performance_boundaries", "Performance boundaries: what a radix tree costs, in Python and in C++", 30,
           "radixlab's trees vs SGLang's Python and C++ trees, cost vs path and tree size, packed bytes, the "
           "Python/native boundary, the GIL measured, the tree's share of the scheduler, LPM's 128 fallback; "
           "Going further: cost vs request length, SGLang's extra tree calls, memory per token", "engine lesson"),
]


def course_map() -> str:
    """The map as a text table (notebook 00 prints it)."""
    w = max(len(l.notebook) for l in COURSE)
    rows = [f"{l.notebook:<{w}} {l.minutes:>3} min  {l.title}\n{'':<{w + 7}}{l.teaches}" for l in COURSE]
    return "\n".join(rows)
