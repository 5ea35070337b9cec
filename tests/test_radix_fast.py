"""The fast matcher (packed bytes) and the readable one (tuples) always agree; the packed key."""

from __future__ import annotations

import random
from array import array

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlab.mem_cache import FastRadixCache, RadixCache, RadixKey
from radixlab.mem_cache.radix_key import common_prefix_len, pack_tokens, packed_prefix_len, unpack_tokens

token_lists = st.lists(st.integers(0, 3), max_size=14)
ops = st.lists(st.tuples(st.sampled_from(["insert", "match", "evict"]), token_lists,
                         st.sampled_from([None, "ns"]), st.integers(0, 6)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4), st.booleans(), ops)
def test_fast_and_readable_matchers_agree(page_size, is_eagle, script):
    fast, slow = FastRadixCache(page_size, is_eagle=is_eagle), RadixCache(page_size, is_eagle=is_eagle)
    slot = 0
    for op, toks, ns, n in script:
        if op == "insert":
            v = torch.arange(slot, slot + len(toks))
            slot += len(toks)
            assert fast.insert(RadixKey(toks, ns), v) == slow.insert(RadixKey(toks, ns), v)
        elif op == "match":
            a, b = fast.match_prefix(RadixKey(toks, ns)), slow.match_prefix(RadixKey(toks, ns))
            assert a.device_indices.tolist() == b.device_indices.tolist()
            assert a.last_node.id == b.last_node.id
        else:
            assert fast.evict(n) == slow.evict(n)
        fast.check_invariants()
        # same shape, same slots, same ids, same clocks
        assert fast.format() == slow.format()
        assert [(x.id, x.last_access_time, x.creation_time, x.hit_count) for x in fast.nodes()] == \
               [(x.id, x.last_access_time, x.creation_time, x.hit_count) for x in slow.nodes()]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(-3, 3), max_size=40), st.lists(st.integers(-3, 3), max_size=40), st.integers(0, 5))
def test_packed_prefix_len_equals_the_tuple_compare(a, b, skip):
    b = [7] * skip + b
    assert packed_prefix_len(pack_tokens(a), pack_tokens(b), 8 * skip) == common_prefix_len(tuple(a), tuple(b[skip:]))


def test_packed_prefix_len_long_edges():
    rng = random.Random(0)
    base = [rng.randrange(50_000) for _ in range(5000)]
    for cut in (0, 1, 2, 3, 7, 8, 1000, 4095, 4999):
        other = base[:cut] + [-1] + base[cut + 1:]
        assert packed_prefix_len(pack_tokens(base), pack_tokens(other)) == cut
    assert packed_prefix_len(pack_tokens(base), pack_tokens(base[:1234])) == 1234


@pytest.mark.parametrize("make", [list, tuple, lambda t: array("q", t), lambda t: array("i", t), torch.tensor,
                                  lambda t: torch.tensor(t, dtype=torch.int32), np.array, lambda t: iter(t)])
def test_every_input_form_packs_the_same(make):
    toks = [5, 0, 2**30, -1, 7]
    assert RadixKey(make(toks)).token_ids == tuple(toks)
    assert RadixKey(make(toks)) == RadixKey(toks)


def test_packing_by_length_stays_exact_and_bounded(monkeypatch):
    """The compiled packers are per length: every length packs as array('q'), and the cache is bounded."""
    import radixlab.mem_cache.radix_key as rk

    monkeypatch.setattr(rk, "_MAX_PACKERS", 8)
    monkeypatch.setattr(rk, "_PACKERS", {})
    rng = random.Random(1)
    for _ in range(3):
        for n in range(0, 30):
            toks = [rng.randrange(-2**63, 2**63) for _ in range(n)]
            assert pack_tokens(toks) == array("q", toks).tobytes()
            assert len(rk._PACKERS) <= 8
    pack_tokens([1, 2])
    packer = rk._PACKERS[2]
    assert pack_tokens([3, 4]) == array("q", [3, 4]).tobytes() and rk._PACKERS[2] is packer  # compiled once, reused
    with pytest.raises(TypeError, match="token_ids must hold integer token ids, got 'x'"):
        pack_tokens([1, "x"])  # the cached packer of that length still reports the bad id
    with pytest.raises(ValueError, match="fit in int64, got 18446744073709551616"):
        pack_tokens([True, 2**64])  # a bool packs as 1 (as in array('q')): the error names the real culprit
    assert pack_tokens([True, False]) == array("q", [1, 0]).tobytes()
    with pytest.raises(ValueError, match="fit in int64"):
        pack_tokens([1, 2**63])


def test_range_and_empty_inputs():
    assert RadixKey(range(3)).token_ids == (0, 1, 2)
    assert len(RadixKey([])) == 0 and RadixKey([]).token_ids == ()
    assert unpack_tokens(b"") == ()


def test_slices_and_bigram_views_keep_the_readable_form_consistent():
    key = RadixKey([5, 6, 7, 8], "ns")
    assert key[1:3].token_ids == (6, 7) and key[1:3].extra_key == "ns"
    big = key.to_bigram()
    assert big.units == ((5, 6), (6, 7), (7, 8)) and len(big) == 3
    assert big[1:].token_ids == (6, 7, 8) and big[1:].units == ((6, 7), (7, 8))
    assert big[:0].token_ids == () and len(big[:0]) == 0
    _ = key.units  # the readable form is cached and sliced along, not rebuilt
    assert key[2:]._tokens == (7, 8)


def test_from_packed_rejects_what_is_not_whole_tokens():
    with pytest.raises(TypeError, match="packed"):
        RadixKey.from_packed(b"\x00" * 7)
    with pytest.raises(TypeError, match="packed"):
        RadixKey.from_packed([1, 2])


def test_the_fast_cache_overrides_only_the_two_walks():
    """One walk per class: FastRadixCache replaces the match and insert walks, nothing else."""
    own = {name for name, v in vars(FastRadixCache).items() if callable(v)}
    assert own == {"_match_prefix_helper", "_insert_helper"}
    assert issubclass(FastRadixCache, RadixCache)


def test_a_plain_list_is_packed_once_per_call(monkeypatch):
    """match_prefix(list) and insert(list) convert the token list exactly once."""
    import radixlab.mem_cache.radix_cache as rc

    calls = []
    real = rc.pack_tokens
    monkeypatch.setattr(rc, "pack_tokens", lambda t, name="token_ids": calls.append(name) or real(t, name))
    cache = RadixCache()
    cache.insert([1, 2, 3, 4], torch.arange(4))
    cache.match_prefix([1, 2, 3, 9])
    assert calls == ["key", "key"]


def test_match_touches_only_the_path():
    """No per-match work proportional to the tree: a match reads the children dicts on its path only."""
    cache = RadixCache()
    for i in range(200):
        cache.insert([i % 7, 1000 + i, 5, 5])
    touched = []

    class Spy(dict):
        def get(self, k, default=None):
            touched.append(k)
            return super().get(k, default)

    def spy(node):
        node.children = Spy(node.children)
        for c in node.children.values():
            spy(c)

    spy(cache.root_node)
    cache.match_prefix([3, 1003, 5, 5, 9])
    assert len(touched) <= 3  # root, then the 1-token node [3], then the leaf's children


def test_the_request_path_converts_each_token_list_once(monkeypatch):
    """admit and cache_finished_req build keys from the request's packed ids: the prompt is packed
    once (at creation), the output ids once (at release); the cache itself packs nothing."""
    import radixlab.mem_cache.radix_cache as rc
    import radixlab.mem_cache.common as rq
    from radixlab.mem_cache import ReqToTokenPool, TokenToKVPoolAllocator

    calls = []
    real = rq.pack_tokens

    def counting(t, name="token_ids"):
        calls.append((name, len(t)))
        return real(t, name)

    monkeypatch.setattr(rq, "pack_tokens", counting)
    monkeypatch.setattr(rc, "pack_tokens", counting)
    cache = RadixCache(1, token_to_kv_pool_allocator=TokenToKVPoolAllocator(64, 1), req_to_token_pool=ReqToTokenPool(2, 64))
    req = rq.Request("r", list(range(10, 30)))
    rq.admit(req, cache)
    rq.extend(req, cache)
    req.output_ids += [7, 8]
    rq.extend(req, cache, 2)
    rq.release(req, cache)
    assert calls == [("origin_input_ids", 20), ("output_ids", 2)]
    assert cache.match_prefix(list(range(10, 30)) + [7, 8, 9]).device_indices.numel() == 22
