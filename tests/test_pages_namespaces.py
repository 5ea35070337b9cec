"""Page alignment, extra_key namespaces and the bigram view of RadixCache (notebook 04)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlab import RadixCache, RadixKey
from radixlab.mem_cache.radix_key import unpack_tokens
from radixlab.course.answers_prefix import reference_longest_cached_prefix
from radixlab.viz.pages import page_size_view, page_table_view

NAMESPACES = [None, "base", "lora-A", "lora-B"]
paths_st = st.lists(st.tuples(st.lists(st.integers(1, 3), max_size=14), st.sampled_from(NAMESPACES)), max_size=6)


def test_lesson_worked_example():
    cache = RadixCache(page_size=4)
    cache.insert(RadixKey([1, 2, 3, 4, 5, 6, 7, 8], "lora_finance"))
    query = [1, 2, 3, 4, 5, 6, 7, 9]
    assert len(cache.match_prefix(RadixKey(query, "lora_finance"))) == 4  # 7 matched → 4 reused
    assert len(cache.match_prefix(RadixKey(query, "lora_medical"))) == 0
    cache.check_invariants()


@settings(max_examples=200, deadline=None)
@given(paths=paths_st, query=st.lists(st.integers(1, 3), max_size=14), ns=st.sampled_from(NAMESPACES),
       page_size=st.integers(1, 8))
def test_match_prefix_is_page_aligned_and_namespaced(paths, query, ns, page_size):
    cache = RadixCache(page_size=page_size)
    for tokens, pns in paths:
        cache.insert(RadixKey(tokens, pns))
        cache.check_invariants()
    got = cache.match_prefix(RadixKey(query, ns))
    cache.check_invariants()
    assert len(got) == reference_longest_cached_prefix(query, ns, paths, page_size)
    assert len(got) % page_size == 0
    assert got.device_indices.tolist() == query[: len(got)]  # default slots are the token ids
    # insert stores whole pages only
    assert all(len(n.key) % page_size == 0 for n in cache.nodes())
    assert cache.total_size() % page_size == 0


@settings(max_examples=100, deadline=None)
@given(paths=paths_st, page_size=st.integers(1, 4))
def test_namespaces_never_share_a_node_at_any_depth(paths, page_size):
    cache = RadixCache(page_size=page_size)
    for tokens, ns in paths:
        cache.insert(RadixKey(tokens, ns))
    for node in cache.nodes():
        walk = node
        while walk.parent is not cache.root_node:
            assert walk.parent.key.extra_key == node.key.extra_key
            walk = walk.parent
    # every namespace's tokens are findable in full (whole pages), whatever the others inserted
    for tokens, ns in paths:
        assert len(cache.match_prefix(RadixKey(tokens, ns))) == len(tokens) // page_size * page_size


def test_same_tokens_two_namespaces_two_branches():
    cache = RadixCache()
    cache.insert(RadixKey([1, 2, 3], "lora-A"))
    cache.insert(RadixKey([1, 2, 3], "lora-B"))
    assert len(cache.root_node.children) == 2
    assert cache.insert(RadixKey([1, 2, 3], "lora-A")) == 3


def test_children_are_keyed_by_first_page():
    cache = RadixCache(page_size=2)
    cache.insert([1, 2, 3, 4])
    cache.insert([1, 5, 6, 7])  # shares token 1 but not the first page: a sibling, no split
    # a child is keyed by its first page (packed int64 bytes; a namespaced key wraps it as (extra_key, page))
    assert sorted(unpack_tokens(k) for k in cache.root_node.children) == [(1, 2), (1, 5)]
    assert cache.num_nodes() == 2


def test_insert_stores_whole_pages_only():
    cache = RadixCache(page_size=4)
    assert cache.insert(list(range(7))) == 0
    assert cache.total_size() == 4
    assert cache.insert([9, 9, 9]) == 0 and cache.total_size() == 4  # less than a page: nothing


@settings(max_examples=100, deadline=None)
@given(cached=st.lists(st.integers(1, 3), min_size=2, max_size=12), query=st.lists(st.integers(1, 3), max_size=12))
def test_bigram_view_matches_raw_minus_one(cached, query):
    cache = RadixCache(is_eagle=True)
    cache.insert(cached)
    raw = reference_longest_cached_prefix(query, None, [(cached, None)], 1)
    assert len(cache.match_prefix(query)) == max(raw - 1, 0)
    cache.check_invariants()


def test_bigram_key_units():
    key = RadixKey([5, 6, 7, 8]).to_bigram()
    assert key.units == ((5, 6), (6, 7), (7, 8)) and len(key) == 3
    assert key[1:].token_ids == (6, 7, 8)
    assert RadixKey([5], is_bigram=True).units == ()


@pytest.mark.parametrize("bad", [0, -1])
def test_page_size_must_be_positive(bad):
    with pytest.raises(ValueError, match="page_size must be"):
        RadixCache(page_size=bad)
    with pytest.raises(ValueError, match="page_size must be"):
        page_table_view([1], [1], bad)
    with pytest.raises(ValueError, match="page_size must be"):
        page_size_view([([1], None)], [1], None, bad)


def test_mixing_namespaces_is_an_error_and_changes_nothing():
    cache = RadixCache()
    cache.insert(RadixKey([1, 2, 3], "lora-A"))
    before = cache.format()
    with pytest.raises(ValueError, match="cannot mix namespaces"):
        cache.insert(RadixKey(RadixKey([1, 2, 3], "lora-A"), extra_key="lora-B"))
    with pytest.raises(ValueError, match="different namespaces"):
        RadixKey([1, 2], "lora-A").match(RadixKey([1, 2], "lora-B"))
    assert cache.format() == before
    # re-wrapping a key keeps its namespace
    assert RadixKey(RadixKey([1, 2], "lora-A")).extra_key == "lora-A"
    assert RadixKey(RadixKey([1, 2], "lora-A"), extra_key="lora-A") == RadixKey([1, 2], "lora-A")


def test_page_table_shows_the_overwrite_only_when_unaligned():
    a, b = [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 9]
    bad = page_table_view(a, b, 4, align=False)
    assert (bad.matched, bad.reused) == (7, 7)
    assert bad.overwrites == [(1, 3, 8, 9)]
    assert "A's KV for token 8 is overwritten" in bad.text
    good = page_table_view(a, b, 4, align=True)
    assert good.reused == 4 and good.overwrites == []
    assert [p["users"] for p in good.pages] == ["A,B", "A", "B"]
    # a match that ends on a page boundary is safe either way
    assert page_table_view(a, [1, 2, 3, 4, 9], 4, align=False).overwrites == []


def test_page_size_view_numbers_and_text():
    paths = [([1, 2, 3, 4, 5, 6, 7, 8], "lora_finance")]
    q = [1, 2, 3, 4, 5, 6, 7, 9]
    got = {p: page_size_view(paths, q, "lora_finance", p).reusable for p in (1, 2, 4, 8, 16)}
    assert got == {1: 7, 2: 6, 4: 4, 8: 0, 16: 0}
    view = page_size_view(paths, q, "lora_finance", 4)
    assert view.raw_match == 7
    assert repr(view).startswith("page_size=4: raw match 7 tokens → reusable ⌊7/4⌋·4 = 4; prefill resumes at token 5")
    assert "[path]" in repr(view)
    assert page_size_view(paths, q, "lora_medical", 4).reusable == 0


def test_writing_an_equal_token_into_a_shared_page_after_the_fork_is_an_overwrite():
    from radixlab.viz.pages import page_table_view

    view = page_table_view([1, 2, 3, 4], [1, 2, 9, 4], page_size=4, align=False)
    assert [(p, s) for p, s, *_ in view.overwrites] == [(0, 2), (0, 3)]
