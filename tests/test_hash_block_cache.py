"""HashBlockCache (the engine's vLLM-style block cache) on its own: the collision guard and locks."""

from __future__ import annotations

import pytest
import torch
import xxhash

from radixlab.mem_cache import (BasePrefixCache, ChunkCache, FastRadixCache, HashBlockCache, RadixCache,
                                RadixKey, ReqToTokenPool, Request, TokenToKVPoolAllocator)

BS = 2


def tokens_only_hash(data: bytes) -> int:
    """A forced collision: the hash of a block ignores its parent (the last BS int64s are its tokens)."""
    return xxhash.xxh64_intdigest(data[-BS * 8:])


def test_an_orphan_is_not_relinked_on_the_hash_alone():
    """A block whose parent was evicted comes back only if its whole old prefix agrees with the query."""
    cache = HashBlockCache(BS, hash_fn=tokens_only_hash)
    cache._insert(RadixKey([1, 2, 3, 4]), torch.tensor([10, 11, 12, 13]))  # blocks a0=[1,2], a1=[3,4]
    cache._insert(RadixKey([5, 6]), torch.tensor([20, 21]))  # c0=[5,6]
    assert cache.evict(BS) == BS  # the free queue's head: a0; a1 is now an orphan in the table
    match = cache.match_prefix(RadixKey([5, 6, 3, 4, 9]))
    # [3,4] after [5,6] is not [3,4] after [1,2]: the orphan's KV (slots 12, 13) must not be reused
    assert match.device_indices.tolist() == [20, 21]
    cache.check_invariants()


def test_an_orphan_with_the_same_prefix_is_relinked():
    cache = HashBlockCache(BS)
    cache._insert(RadixKey([1, 2, 3, 4]), torch.tensor([10, 11, 12, 13]))
    cache.evict(BS)  # a0 goes, a1 stays, orphaned
    cache._insert(RadixKey([1, 2]), torch.tensor([30, 31]))  # a0 again, new slots
    assert cache.match_prefix(RadixKey([1, 2, 3, 4, 9])).device_indices.tolist() == [30, 31, 12, 13]
    cache.check_invariants()


def test_locking_another_caches_block_is_refused():
    mine, other = HashBlockCache(BS), HashBlockCache(BS)
    other._insert(RadixKey([1, 2]), torch.tensor([0, 1]))
    block = other.match_prefix(RadixKey([1, 2, 3])).last_node
    for call in (mine.inc_lock_ref, mine.dec_lock_ref):
        with pytest.raises(ValueError, match="does not belong to this cache"):
            call(block)
    assert block.lock_ref == 0 and block in other.free_queue
    other.check_invariants()
    with pytest.raises(TypeError, match="HashBlock"):
        mine.inc_lock_ref(RadixCache().root_node)


def test_every_prefix_cache_implements_the_written_interface():
    for cls in (RadixCache, FastRadixCache, HashBlockCache, ChunkCache):
        assert issubclass(cls, BasePrefixCache)
    assert HashBlockCache.caches_on_alloc and not RadixCache.caches_on_alloc and not ChunkCache.caches_on_alloc
    with pytest.raises(NotImplementedError, match="at allocation"):
        RadixCache().cache_at_allocation(Request("r", [1, 2]))


def test_a_request_keeps_its_block_hashes_through_its_life():
    alloc, pool = TokenToKVPoolAllocator(32, 1), ReqToTokenPool(2, 32)
    cache = HashBlockCache(BS, token_to_kv_pool_allocator=alloc, req_to_token_pool=pool)
    from radixlab.mem_cache import admit, extend, release
    req = Request("r", [1, 2, 3, 4, 5])
    admit(req, cache), extend(req, cache), release(req, cache)
    assert len(req.block_hashes) == 2 and cache.hash_computations == 2  # matched, then inserted: hashed once
    assert alloc.available_size() + cache.total_size() == 32


def test_unlocking_a_block_before_the_locked_one_is_refused():
    cache = HashBlockCache(BS)
    cache._insert(RadixKey([1, 2, 3, 4]), torch.tensor([0, 1, 2, 3]))
    last = cache.match_prefix(RadixKey([1, 2, 3, 4, 5])).last_node
    cache.inc_lock_ref(last)
    with pytest.raises(ValueError, match="no lock was taken on it"):
        cache.dec_lock_ref(last.parent)
    assert (last.lock_ref, last.parent.lock_ref) == (1, 1)
    cache.check_invariants()
    cache.dec_lock_ref(last)  # the owner still can
    assert cache.protected_size() == 0
