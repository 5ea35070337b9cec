"""``python -m radixlab bench evict``: the linked-list baseline is a correct LRU cache; output has ratios."""

from __future__ import annotations

import re

from radixlab.__main__ import main as cli
from radixlab.benchmarks.evict import ListLRURadixCache, replay
from radixlab.sim.eviction_sim import capacity_grid, simulate
from radixlab.mem_cache import ReqToTokenPool, Request, TokenToKVPoolAllocator, admit, extend, release
from radixlab.sim.workloads import few_shot, shared_system_prompt


def test_tiny_run_prints_both_designs_and_ratios(capsys):
    assert cli(["bench", "evict", "--requests", "40", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("evict: shared_system_prompt, 40 requests")
    assert re.search(r"^heap\s+\d+\.\d ms\s+\d+\.\d ms\s+\d+$", out, re.M)
    assert re.search(r"^list\s+\d+\.\d ms\s+\d+\.\d ms\s+\d+$", out, re.M)
    assert re.search(r"list / heap: whole replay \d+\.\d\d×, time inside evict \d+\.\d\d×", out)


def test_list_lru_hits_like_the_heap_lru_and_never_leaks():
    trace = few_shot(num_requests=60, seed=2)
    cap = capacity_grid(trace, [0.2])[0]
    _, _, hits = replay(trace, cap, ListLRURadixCache)
    assert hits == simulate(trace, cap, "lru").hit_tokens
    alloc = TokenToKVPoolAllocator(cap)
    cache = ListLRURadixCache(token_to_kv_pool_allocator=alloc, req_to_token_pool=ReqToTokenPool(1, 512))
    for i, item in enumerate(shared_system_prompt(num_requests=30, seed=1)):
        r = Request(str(i), list(item.prompt_ids), list(item.output_ids))
        admit(r, cache), extend(r, cache, len(r.all_ids) - r.seq_len), release(r, cache)
        cache.check_invariants()
        assert set(cache.lru) == set(cache.nodes())
    cache.evict(10**9)
    assert alloc.available_size() == cap and not cache.lru


def test_list_lru_respects_locks():
    cache = ListLRURadixCache()
    cache.insert([1, 2, 3, 4])
    cache.insert([1, 2, 9])
    cache.inc_lock_ref(cache.match_prefix([1, 2, 3, 4]).last_node)
    assert cache.evict(100) == 1 and cache.total_size() == 4
