"""The chained-hash block cache (radixlab.mem_cache.hash_cache) against the seed's formula and a brute force."""

from __future__ import annotations

import copy
from array import array

import pytest
import torch
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlab import RadixKey
from radixlab.course.answers_prefix import reference_longest_cached_prefix
from radixlab.mem_cache import HashPrefixCache, RequestBlockHashes, block_hash_input, chain_hashes


def brute_force(prompts, query, block_size, extra_key=None):
    """Longest whole-block common prefix with any inserted prompt in the same namespace: exactly
    exercise 04.1's question with pages as blocks."""
    return reference_longest_cached_prefix(query, extra_key, prompts, block_size)


def test_chain_hash_is_the_seeds_formula():
    toks = list(range(100, 148))  # three blocks of 16
    tb = lambda blk: array("q", blk).tobytes()
    h0 = xxhash.xxh64_intdigest(b"\x00" * 8 + tb(toks[0:16]))
    h1 = xxhash.xxh64_intdigest(str(h0).encode() + tb(toks[16:32]))
    h2 = xxhash.xxh64_intdigest(str(h1).encode() + tb(toks[32:48]))
    assert chain_hashes(toks) == [h0, h1, h2]
    assert chain_hashes(toks + [1, 2, 3]) == [h0, h1, h2]  # a partial block has no hash


def test_extra_key_changes_every_hash_of_the_chain():
    toks = list(range(64))
    plain, salted = chain_hashes(toks), chain_hashes(toks, extra_key="lora-A")
    assert all(a != b for a, b in zip(plain, salted))
    assert block_hash_input(None, [1], "x") != block_hash_input(None, [1], None)
    assert block_hash_input(5, [1], "x") == block_hash_input(5, [1], None)  # folded into block 0 only


def test_insert_and_lookups_on_a_small_example():
    c = HashPrefixCache(block_size=4)
    assert c.insert(list(range(10))) == 0  # blocks [0..3], [4..7]; tokens 8, 9 are not stored
    assert len(c) == 2 and c.total_tokens() == 8
    assert c.insert(list(range(12))) == 8
    for m in (c.match_probe_down(list(range(12)) + [99]), c.match_forward(list(range(12)) + [99])):
        assert m.hit_tokens == 12
        assert m.device_indices.tolist() == list(range(12))
    fwd = c.match_forward([0, 1, 2, 3, 4, 5, 6, 99, 8, 9, 10, 11])
    assert (fwd.hit_tokens, fwd.hash_computations, fwd.dict_probes) == (4, 2, 2)
    down = c.match_probe_down([0, 1, 2, 3, 4, 5, 6, 99, 8, 9, 10, 11])
    assert (down.hit_tokens, down.hash_computations, down.dict_probes) == (4, 3, 3)
    assert c.stats.lookups == 4


def test_value_gives_slots_and_refs_count_inserts():
    c = HashPrefixCache(block_size=2)
    c.insert([1, 2, 3, 4], value=torch.tensor([10, 11, 12, 13]))
    c.insert([1, 2, 5, 6], value=[20, 21, 22, 23])
    m = c.match_forward([1, 2, 5, 6])
    assert m.device_indices.tolist() == [10, 11, 22, 23]  # first block keeps the first insert's slots
    assert [b.ref for b in c.table.values()] == [2, 1, 1]


def test_namespaces_do_not_share():
    c = HashPrefixCache(block_size=4)
    c.insert(list(range(8)), extra_key="lora-A")
    assert c.match_forward(list(range(8))).hit_tokens == 0
    assert c.match_forward(list(range(8)), extra_key="lora-B").hit_tokens == 0
    assert c.match_probe_down(RadixKey(list(range(8)), "lora-A")).hit_tokens == 8


@settings(max_examples=150, deadline=None)
@given(prompts=st.lists(st.tuples(st.lists(st.integers(0, 2), max_size=14), st.sampled_from([None, "a"])), max_size=5),
       query=st.lists(st.integers(0, 2), max_size=14), ns=st.sampled_from([None, "a"]),
       block_size=st.integers(1, 4))
def test_lookups_match_brute_force_and_count_their_work(prompts, query, ns, block_size):
    c = HashPrefixCache(block_size)
    for p, pns in prompts:
        c.insert(p, extra_key=pns)
    want = brute_force(prompts, query, block_size, ns)
    n_blocks = len(query) // block_size
    fwd, down = c.match_forward(query, ns), c.match_probe_down(query, ns)
    assert fwd.hit_tokens == down.hit_tokens == want
    k = want // block_size
    assert fwd.hash_computations == fwd.dict_probes == min(k + 1, n_blocks)
    assert down.hash_computations == n_blocks
    assert down.dict_probes == (n_blocks - k + 1 if k else n_blocks)
    assert fwd.device_indices.tolist() == list(query[:want])  # default slots are the token ids
    # vLLM's lookup: the request's kept hashes, probed front to back; nothing hashed per lookup
    kept = RequestBlockHashes(query, block_size, extra_key=ns)
    assert kept.hashes == chain_hashes(query, block_size, ns) and kept.hash_computations == n_blocks
    for guard in (None, query):
        m = c.match_kept_hashes(kept.hashes, tokens=guard)
        assert m.hit_tokens == want and m.hash_computations == 0
        assert m.dict_probes == min(k + 1, n_blocks)


@settings(max_examples=100, deadline=None)
@given(tokens=st.lists(st.integers(0, 5), max_size=40), cuts=st.lists(st.integers(0, 40), max_size=6),
       block_size=st.integers(1, 5))
def test_request_hashes_grow_as_blocks_fill_and_each_block_is_hashed_once(tokens, cuts, block_size):
    """Fed in pieces (prompt, then output tokens), the kept hashes equal hashing the whole at once."""
    req = RequestBlockHashes([], block_size)
    start = 0
    for cut in sorted(cuts) + [len(tokens)]:
        cut = min(max(cut, start), len(tokens))
        before = len(req)
        added = req.append(tokens[start:cut])
        assert added == len(req) - before == cut // block_size - start // block_size
        start = cut
    assert req.hashes == chain_hashes(tokens, block_size)
    assert req.hash_computations == len(tokens) // block_size  # never re-hashed


def test_kept_hashes_trust_the_hash_unless_tokens_are_given():
    weak = HashPrefixCache(block_size=2, hash_fn=lambda data: len(data))  # block 0 always hashes alike
    weak.insert([1, 2])
    other = RequestBlockHashes([3, 4], 2, hash_fn=weak.hash_fn)
    assert weak.match_kept_hashes(other.hashes).hit_tokens == 2  # like vLLM: a hash hit is trusted
    guarded = weak.match_kept_hashes(other.hashes, tokens=[3, 4])
    assert guarded.hit_tokens == 0 and guarded.collisions == 1
    with pytest.raises(TypeError, match="block_hashes"):
        weak.match_kept_hashes(12345)
    with pytest.raises(TypeError, match="new_tokens"):
        RequestBlockHashes([1, 2]).append([1.5])


@settings(max_examples=100, deadline=None)
@given(prompts=st.lists(st.lists(st.integers(0, 3), max_size=12), max_size=6),
       query=st.lists(st.integers(0, 3), max_size=12))
def test_collision_guard_never_returns_wrong_tokens(prompts, query):
    weak = HashPrefixCache(block_size=2, hash_fn=lambda data: len(data) % 3)  # collides constantly
    for p in prompts:
        weak.insert(p)
    ceiling = brute_force([(p, None) for p in prompts], query, 2)
    for m in (weak.match_forward(query), weak.match_probe_down(query)):
        assert m.hit_tokens <= ceiling
        got = [t for b in m.blocks for t in b.tokens]
        assert got == list(query[: m.hit_tokens])


def test_collision_is_counted():
    weak = HashPrefixCache(block_size=2, hash_fn=lambda data: 7)
    weak.insert([1, 2])
    weak.insert([3, 4])  # same hash, different tokens: not stored
    assert len(weak) == 1 and weak.stats.collisions == 1
    m = weak.match_probe_down([3, 4])
    assert m.hit_tokens == 0 and m.collisions == 1


@pytest.mark.parametrize("bad", [0, -16])
def test_block_size_must_be_positive(bad):
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        HashPrefixCache(bad)
    with pytest.raises(ValueError, match="block_size"):
        chain_hashes([1, 2], bad)


def test_bad_input_leaves_the_table_unchanged():
    c = HashPrefixCache(block_size=2)
    c.insert([1, 2, 3, 4])
    before = copy.deepcopy((list(c.table), [b.ref for b in c.table.values()]))
    with pytest.raises(ValueError, match="one slot index per token"):
        c.insert([1, 2, 3, 4, 5, 6], value=[1, 2])
    with pytest.raises(TypeError, match="tokens"):
        c.insert([1, 2.5, 3])
    with pytest.raises(TypeError, match="block_size must be an int"):
        HashPrefixCache(2.0)
    with pytest.raises(ValueError, match="cannot mix namespaces"):
        c.insert(RadixKey([5, 6], "lora-A"), extra_key="lora-B")
    with pytest.raises(ValueError, match="bigram"):
        c.match_forward(RadixKey([1, 2, 3], is_bigram=True))
    with pytest.raises(ValueError, match="strategy"):
        c.match_prefix([1, 2], strategy="sideways")
    assert (list(c.table), [b.ref for b in c.table.values()]) == before


def test_format_is_a_flat_table():
    c = HashPrefixCache(block_size=2)
    c.insert([1, 2, 3, 4])
    c.insert([1, 2, 5, 6], extra_key="x")
    text = c.format()
    assert text.splitlines()[0] == "hash table  (4 blocks of 2 tokens)"
    assert "parent=#0" in text and "ns='x'" in text
