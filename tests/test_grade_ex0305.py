"""Exercises 03.1 and 05.1 in the grader: honest answers score 3, the blank and wrong answers do not, and
radixlab's own implementation of the probe / the hand-over is absent from the executor's copy."""

from __future__ import annotations

import pytest

from grade_helpers import assert_grader_score
from radixlab.course import sandbox as sb

boxed = pytest.mark.skipif(not sb.sandboxed(), reason=f"no bubblewrap here: {sb.sandbox_works()}")

PROBE = ("def kept_hash_hit(req, table):\n    hit = 0\n    for h in req.hashes:\n"
         "        if table.get(h) is None:\n            break\n        hit += 1\n    return hit\n")
HANDOVER = ("from radixlab.mem_cache import RadixKey\n\n"
            "def cache_finished_req(cache, req):\n"
            "    kv = cache.req_to_token_pool.req_to_token[req.req_pool_idx, :req.seq_len]\n"
            "    tokens = (req.origin_input_ids + req.output_ids)[:req.seq_len]\n"
            "    n = len(tokens) // cache.page_size * cache.page_size\n"
            "    had = cache.insert(RadixKey(tokens[:n], req.extra_key), kv[:n].clone())\n"
            "    cache.token_to_kv_pool_allocator.free(kv[req.cache_protected_len:had])\n"
            "    cache.token_to_kv_pool_allocator.free(kv[n:])\n"
            "    cache.dec_lock_ref(req.last_node)\n")

CASES = {
    "03.1 honest": ("03.1", PROBE, 3),
    "03.1 blank": ("03.1", "def kept_hash_hit(req, table):\n    raise NotImplementedError()\n", 0),
    "03.1 kept probing after the miss": ("03.1", "def kept_hash_hit(req, table):\n"
                                         "    return sum(h in table for h in req.hashes)\n", None),
    "03.1 forged: radixlab's match_kept_hashes": ("03.1", "from radixlab.mem_cache import HashPrefixCache\n"
        "def kept_hash_hit(req, table):\n    c = HashPrefixCache(req.block_size); c.table = table\n"
        "    return len(c.match_kept_hashes(req.hashes).blocks)\n", 0),
    "05.1 honest": ("05.1", HANDOVER, 3),
    "05.1 blank": ("05.1", "def cache_finished_req(cache, req):\n    raise NotImplementedError()\n", 0),
    "05.1 keeps the lock": ("05.1", HANDOVER.replace("    cache.dec_lock_ref(req.last_node)\n", "    pass\n"), None),
    "05.1 forged: radixlab's own method": ("05.1", "from radixlab.mem_cache import RadixCache\n"
        "def cache_finished_req(cache, req):\n    RadixCache.cache_finished_req(cache, req)\n", 0),
    "05.1 forged: cache_unfinished_req then the tail": ("05.1", HANDOVER.replace(
        "    had = cache.insert(", "    cache.cache_unfinished_req(req)\n    had = cache.insert("), 0),
}


@boxed
@pytest.mark.parametrize("name", sorted(CASES))
def test_grader_scores(name):
    assert_grader_score(*CASES[name])
