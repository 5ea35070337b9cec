"""The request lifecycle in EAGLE's bigram view: hits are one short of the raw match, nothing leaks."""

import pytest

from radixlab.mem_cache import RadixCache, ReqToTokenPool, Request, TokenToKVPoolAllocator, admit, extend, release

PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 6, 7, 8, 10], [1, 2, 3, 4, 5, 6, 7, 8, 9, 11]]


@pytest.mark.parametrize("is_eagle, page_size, want_hits", [
    (False, 1, [0, 8, 9]), (False, 4, [0, 8, 8]), (True, 1, [0, 7, 8]), (True, 4, [0, 4, 8])])
def test_bigram_lifecycle_hits_and_no_leak(is_eagle, page_size, want_hits):
    alloc = TokenToKVPoolAllocator(256, page_size=page_size)
    cache = RadixCache(page_size=page_size, token_to_kv_pool_allocator=alloc,
                       req_to_token_pool=ReqToTokenPool(4, 64), is_eagle=is_eagle)
    hits = []
    for i, prompt in enumerate(PROMPTS):
        req = Request(str(i), prompt, [20 + i, 30 + i])
        hits.append(admit(req, cache))
        extend(req, cache, len(req.all_ids) - req.seq_len)
        release(req, cache)
        cache.check_invariants()
        assert cache.protected_size() == 0
    assert hits == want_hits
    assert all(n.key.is_bigram == is_eagle for n in cache.nodes())
    cache.evict(10**6)
    assert cache.total_size() == 0 and alloc.available_size() == 256


def test_a_finished_request_cannot_be_admitted_again():
    alloc = TokenToKVPoolAllocator(32)
    pool = ReqToTokenPool(2, 16)
    cache = RadixCache(token_to_kv_pool_allocator=alloc, req_to_token_pool=pool)
    req = Request("a", [1, 2, 3])
    admit(req, cache), extend(req, cache), release(req, cache)
    with pytest.raises(ValueError, match="finished"):
        admit(req, cache)
    assert pool.available_size() == 2 and cache.protected_size() == 0
