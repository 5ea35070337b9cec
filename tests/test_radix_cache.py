"""RadixCache against a brute-force reference: page-aligned, per-namespace longest prefix."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlab.mem_cache import FastRadixCache, RadixCache, RadixKey
from radixlab.mem_cache.radix_key import common_prefix_len


def brute_match(inserted, query, extra_key, page_size):
    """(length, slots) the cache must return, from the list of (key, value) inserts in order."""
    q = list(query)
    best = 0
    for key, _ in inserted:
        if key.extra_key != extra_key:
            continue
        n = min(common_prefix_len(tuple(q), key.token_ids), len(key) // page_size * page_size)
        best = max(best, n // page_size * page_size)
    slots = []
    for page_start in range(0, best, page_size):
        end = page_start + page_size
        for key, value in inserted:  # the first insert that cached this page owns its slots
            if key.extra_key == extra_key and len(key) // page_size * page_size >= end \
                    and list(key.token_ids[:end]) == q[:end]:
                slots += value[page_start:end]
                break
    return best, slots


keys = st.tuples(st.lists(st.integers(0, 3), max_size=10), st.sampled_from([None, "lora_a", "lora_b"]))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.lists(keys, min_size=1, max_size=10), st.lists(keys, max_size=6))
def test_match_equals_brute_force(page_size, inserts, queries):
    cache = RadixCache(page_size=page_size)
    done = []
    for i, (tokens, ns) in enumerate(inserts):
        key = RadixKey(tokens, ns)
        value = [1000 * i + j for j in range(len(tokens))]
        want_prefix, _ = brute_match(done, tokens, ns, page_size)
        assert cache.insert(key, value) == want_prefix
        done.append((key, value))
        cache.check_invariants()
    for tokens, ns in queries + inserts:
        want_len, want_slots = brute_match(done, tokens, ns, page_size)
        result = cache.match_prefix(RadixKey(tokens, ns))
        assert len(result.device_indices) == want_len
        assert result.device_indices.tolist() == want_slots
        cache.check_invariants()
        # last_node ends exactly at the match
        path, node = 0, result.last_node
        while node is not cache.root_node:
            path += len(node.key)
            node = node.parent
        assert path == want_len


def test_lesson4_worked_example():
    cache = RadixCache(page_size=4)
    cache.insert(RadixKey([1, 2, 3, 4, 5, 6, 7, 8], "lora_finance"))
    hit = cache.match_prefix(RadixKey([1, 2, 3, 4, 5, 6, 7, 9], "lora_finance"))
    assert len(hit.device_indices) == 4  # 7 matched -> floor(7/4)*4
    assert len(cache.match_prefix(RadixKey([1, 2, 3, 4, 5, 6, 7, 9], "lora_medical")).device_indices) == 0


def test_namespaces_never_share_a_node():
    cache = RadixCache()
    cache.insert(RadixKey([1, 2, 3], "a"))
    cache.insert(RadixKey([1, 2, 3], "b"))
    cache.insert(RadixKey([1, 2, 4], "a"))
    assert len(cache.root_node.children) == 2
    for node in cache.nodes():
        ns = node.key.extra_key
        walk = node
        while walk is not cache.root_node:
            assert walk.key.extra_key == ns
            walk = walk.parent
    cache.check_invariants()


def test_split_keeps_the_slots_and_clones_the_indices():
    """The KV slots stay where they are; each half owns a copy of its indices (SGLang PR #17191)."""
    cache = RadixCache()
    cache.insert([5, 6, 7], [10, 11, 12])
    original = next(cache.nodes())
    storage = original.value.untyped_storage().data_ptr()
    cache.match_prefix([5, 6])  # a mid-edge match splits
    prefix = next(cache.nodes())
    assert prefix is not original and original.parent is prefix
    assert prefix.value.tolist() == [10, 11] and original.value.tolist() == [12]
    assert storage not in (prefix.value.untyped_storage().data_ptr(), original.value.untyped_storage().data_ptr())
    assert prefix.value.untyped_storage().nbytes() == 2 * 8 and original.value.untyped_storage().nbytes() == 8


def test_insert_copies_the_callers_indices():
    cache = RadixCache()
    row = torch.tensor([7, 8, 9])
    cache.insert([1, 2, 3], row)
    row[0] = 99
    assert cache.match_prefix([1, 2, 3]).device_indices.tolist() == [7, 8, 9]


def test_reset_and_text_form():
    cache = RadixCache()
    cache.insert([1, 2, 3])
    cache.insert([1, 2, 4, 5])
    assert cache.format() == (
        "root  (#tokens=5, evictable=5, protected=0)\n"
        "└─ #2 [1, 2] slots=[1, 2] lock_ref=0 t=2\n"
        "   ├─ #1 [3] slots=[3] lock_ref=0 t=2\n"
        "   └─ #3 [4, 5] slots=[4, 5] lock_ref=0 t=2")
    assert cache.total_size() == 5
    cache.reset()
    assert cache.total_size() == 0 and cache.num_nodes() == 0 and cache.root_node.id == 0


def test_bigram_view_match_is_raw_minus_one():
    cache = RadixCache(is_eagle=True)
    cache.insert(RadixKey([1, 2, 3, 4, 5]))
    assert len(cache.match_prefix(RadixKey([1, 2, 3, 9])).device_indices) == 2  # raw match 3 -> 2 bigrams
    assert len(RadixKey([1, 2, 3]).to_bigram()) == 2


# -- bad input: clear errors naming the argument, nothing changed --------------------------------


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-4, ValueError), (True, TypeError), ("4", TypeError), (2.0, TypeError)])
def test_page_size_must_be_a_positive_int(bad, exc):
    with pytest.raises(exc, match="page_size"):
        RadixCache(page_size=bad)


@pytest.mark.parametrize("tokens", [[1.5, 2], ["a", "b"], "abc", [None, 2], 7, torch.tensor([1.0, 2.0]),
                                    torch.tensor([True, False]), b"\x01\x02"])
def test_token_ids_must_be_integers(tokens):
    cache = RadixCache()
    cache.insert([1, 2, 3])
    before = cache.format()
    with pytest.raises(TypeError, match="token_ids|key"):
        cache.insert(tokens)
    with pytest.raises(TypeError, match="token_ids|key"):
        cache.match_prefix(tokens)
    assert cache.format() == before


def test_token_ids_must_fit_int64_and_bools_read_as_ints():
    cache = RadixCache()
    cache.insert([1, 2, 3])
    before = cache.format()
    with pytest.raises(ValueError, match="token_ids|key.*int64"):
        cache.insert([1, 2**63])
    assert cache.format() == before
    # bool is an int subclass: the packing (like SGLang's array('q')) reads True as 1, with no O(n) type scan
    assert RadixKey([True, 2]) == RadixKey([1, 2])


@pytest.mark.parametrize("value", [[1, 2], [1, 2, 3, 4], torch.tensor([1.0, 2.0, 3.0]), torch.zeros(3, 1, dtype=torch.int64)])
def test_value_must_match_key(value):
    cache = RadixCache()
    cache.insert([1, 2, 9])
    before = cache.format()
    with pytest.raises((ValueError, TypeError), match="value"):
        cache.insert([1, 2, 3], value)
    assert cache.format() == before  # in particular: no split of [1, 2, 9] happened


def test_matching_across_namespaces_is_an_error():
    with pytest.raises(ValueError, match="extra_key"):
        RadixKey([1, 2], "a").match(RadixKey([1, 2], "b"))


def test_unlock_of_unlocked_node_is_an_error_and_changes_nothing():
    cache = RadixCache()
    cache.insert([1, 2, 3])
    node = cache.match_prefix([1, 2, 3]).last_node
    with pytest.raises(ValueError, match="lock_ref"):
        cache.dec_lock_ref(node)
    assert (cache.evictable_size(), cache.protected_size()) == (3, 0)
    other = RadixCache()
    other.insert([1])
    with pytest.raises(ValueError, match="node"):
        cache.inc_lock_ref(other.match_prefix([1]).last_node)
    assert (cache.evictable_size(), cache.protected_size()) == (3, 0)


def test_split_clones_the_index_tensors_so_evicted_indices_are_freed():
    """SGLang v0.5.17 clones both halves in _split_node (PR #17191): no view keeps evicted indices alive."""
    from radixlab.mem_cache import TokenToKVPoolAllocator

    alloc = TokenToKVPoolAllocator(20_000, 1)
    cache = RadixCache(1, token_to_kv_pool_allocator=alloc)
    long = list(range(10_000))
    cache.insert(long, alloc.alloc(len(long)))
    cache.insert(long[:4] + [-1], torch.cat([cache.match_prefix(long[:4]).device_indices, alloc.alloc(1)]))
    prefix = cache.match_prefix(long[:4]).last_node
    assert prefix.value.untyped_storage().nbytes() == 4 * prefix.value.element_size()
    cache.inc_lock_ref(cache.match_prefix(long[:4] + [-1]).last_node)  # the short request is still running
    cache.evict(10_000)
    need, held = cache.index_memory()
    assert held == need and need == 5 * 8, (need, held)


@pytest.mark.parametrize("cache_cls", [FastRadixCache, RadixCache])
def test_chunked_insert_leaves_hit_counts_alone(cache_cls):
    """SGLang's InsertParams.chunked: a chunked prefill re-inserting its own chunks is not a hit (LFU)."""
    cache = cache_cls()
    cache.insert([1, 2, 3, 4], chunked=True)
    (node,) = cache.root_node.children.values()
    assert node.hit_count == 0
    cache.insert([1, 2, 3, 4, 5, 6], chunked=True)  # the next chunk: same head, a new tail
    head, = cache.root_node.children.values()
    tail, = head.children.values()
    assert (head.hit_count, tail.hit_count) == (0, 0)
    cache.insert([1, 2, 3, 4, 5, 6])  # another request: a real hit on both
    assert (head.hit_count, tail.hit_count) == (1, 1)
    cache.insert([1, 2, 9])  # splits the head: both halves keep its count, the new leaf starts at 1
    assert [n.hit_count for n in cache.nodes()] == [2, 1, 1, 1]


# -- reliability: locks and slots are checked where they enter ----------------------------------


@pytest.mark.parametrize("cache_cls", [FastRadixCache, RadixCache])
def test_unlocking_an_ancestor_of_a_locked_node_is_refused(cache_cls):
    """The lock was taken on the leaf: unlocking its parent would leave the owner unable to unlock."""
    cache = cache_cls()
    cache.insert([1, 2, 3, 4])
    cache.insert([1, 2, 5, 6])  # split: [1, 2] -> [3, 4], [5, 6]
    leaf = cache.match_prefix([1, 2, 3, 4]).last_node
    cache.inc_lock_ref(leaf)
    before = (cache.format(), cache.evictable_size(), cache.protected_size())
    with pytest.raises(ValueError, match="no lock was taken on it"):
        cache.dec_lock_ref(leaf.parent)
    assert (cache.format(), cache.evictable_size(), cache.protected_size()) == before
    cache.check_invariants()
    cache.inc_lock_ref(leaf.parent)  # a lock taken on the parent itself may be dropped
    cache.dec_lock_ref(leaf.parent)
    cache.dec_lock_ref(leaf)  # the owner can still unlock
    cache.check_invariants()
    assert cache.protected_size() == 0


def test_a_node_of_another_cache_or_of_before_a_reset_is_refused():
    a, b = RadixCache(), RadixCache()
    a.insert([1, 2])
    node = a.match_prefix([1, 2]).last_node
    with pytest.raises(ValueError, match="does not belong"):
        b.inc_lock_ref(node)
    a.reset()
    with pytest.raises(ValueError, match="does not belong"):
        a.inc_lock_ref(node)


@pytest.mark.parametrize("bad, match", [([-1, 0, 1], "slot -1"), ([0, 1, 64], "slot 64, outside"),
                                        ([0, 1, 40], "not handed out")])
def test_insert_refuses_slots_the_allocator_did_not_hand_out(bad, match):
    from radixlab.mem_cache import TokenToKVPoolAllocator

    alloc = TokenToKVPoolAllocator(64, 1)
    cache = RadixCache(token_to_kv_pool_allocator=alloc)
    alloc.alloc(8)  # slots 0..7 are handed out
    with pytest.raises(ValueError, match=match):
        cache.insert([1, 2, 3], torch.tensor(bad))
    assert cache.total_size() == 0
    cache.insert([1, 2, 3], torch.tensor([0, 1, 2]))
    cache.check_invariants()


def test_insert_without_an_allocator_still_refuses_negative_slots():
    with pytest.raises(ValueError, match="slot -3"):
        RadixCache().insert([1, 2], [4, -3])


def test_the_walk_to_the_root_runs_only_with_the_debug_switch(monkeypatch):
    """The O(depth) membership walk is off the hot path: a lock does an O(1) owner check instead."""
    from radixlab.utils import debug

    cache = RadixCache()
    cache.insert([1, 2, 3])
    node = cache.match_prefix([1, 2, 3]).last_node
    detached = cache._new_node(node.key, node.value.clone(), None)  # this tree's tag, on no path of it
    detached.parent = cache._new_node(node.key, node.value.clone(), None)
    monkeypatch.setattr(debug, "DEBUG", False)
    cache._check_in_tree(detached, "node")  # only the O(1) check ran
    monkeypatch.setattr(debug, "DEBUG", True)
    with pytest.raises(ValueError, match="does not belong"):
        cache._check_in_tree(detached, "node")


def test_a_tensor_of_slots_without_an_allocator_is_checked_with_the_debug_switch(monkeypatch):
    """A tree that owns no KV checks a tensor's slots only under RADIXLAB_DEBUG (the reduction would add
    about a fifth to every insert); with an allocator, or for a list, the check always runs."""
    from radixlab.mem_cache import TokenToKVPoolAllocator
    from radixlab.utils import debug

    monkeypatch.setattr(debug, "DEBUG", False)
    RadixCache().insert([1, 2], torch.tensor([4, -3]))  # opaque values: accepted
    with pytest.raises(ValueError, match="slot -3"):
        RadixCache(token_to_kv_pool_allocator=TokenToKVPoolAllocator(8, 1)).insert([1, 2], torch.tensor([4, -3]))
    monkeypatch.setattr(debug, "DEBUG", True)
    cache = RadixCache()
    with pytest.raises(ValueError, match="slot -3"):
        cache.insert([1, 2], torch.tensor([4, -3]))
    assert cache.total_size() == 0
