"""ReqToTokenPool and TokenToKVPoolAllocator: ownership of indices, clear errors, nothing changed on error."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlab.mem_cache import ReqToTokenPool, TokenToKVPoolAllocator


def state(a: TokenToKVPoolAllocator):
    return list(a.free_pages), a.pages_in_use()


def test_alloc_and_free_round_trip():
    a = TokenToKVPoolAllocator(8)
    x = a.alloc(3)
    assert x.tolist() == [0, 1, 2] and x.dtype == torch.int64 and a.available_size() == 5
    a.free(x[1:])
    assert a.available_size() == 7
    assert a.alloc(7).tolist() == [3, 4, 5, 6, 7, 1, 2]  # freed slots go to the back of the list
    assert a.alloc(1) is None


def test_paged_alloc_hands_out_whole_aligned_pages():
    a = TokenToKVPoolAllocator(16, page_size=4)
    x = a.alloc(8)
    assert x.tolist() == list(range(8)) and a.available_size() == 8
    a.free([0, 1])  # any slot of a page frees the page (SGLang frees by page too)
    assert a.available_size() == 12 and a.pages_in_use() == {1}


def test_alloc_returns_none_and_changes_nothing_when_short():
    a = TokenToKVPoolAllocator(8, page_size=4)
    a.alloc(4)
    before = state(a)
    assert a.alloc(8) is None and state(a) == before


def test_alloc_extend_fills_the_last_page_first():
    a = TokenToKVPoolAllocator(16, page_size=4)
    first = a.alloc(4)[:3]  # a request with 3 tokens in page 0
    more = a.alloc_extend(3, int(first[-1]), 6)
    assert more.tolist() == [3, 4, 5, 6, 7, 8]  # slot 3 finishes page 0, then pages 1 and 2
    assert all(s % 4 == p % 4 for p, s in zip(range(3, 9), more.tolist()))
    before = state(a)
    assert a.alloc_extend(9, 8, 20) is None and state(a) == before


def test_alloc_extend_page_size_one_is_plain_alloc():
    a = TokenToKVPoolAllocator(4)
    assert a.alloc_extend(0, -1, 2).tolist() == [0, 1]
    assert a.alloc_extend(2, 1, 2).tolist() == [2, 3]


@pytest.mark.parametrize("page_size", [1, 4])
def test_double_free_raises_and_changes_nothing(page_size):
    a = TokenToKVPoolAllocator(8, page_size)
    x = a.alloc(4)
    a.free(x)
    before = state(a)
    with pytest.raises(ValueError, match="not allocated"):
        a.free(x)
    assert state(a) == before


def test_free_never_handed_out_and_out_of_range_raise():
    a = TokenToKVPoolAllocator(8)
    a.alloc(2)
    before = state(a)
    with pytest.raises(ValueError, match="not allocated"):
        a.free([5])
    with pytest.raises(ValueError, match="outside this pool"):
        a.free([8])
    with pytest.raises(ValueError, match="twice"):
        a.free([0, 0])
    with pytest.raises(ValueError, match="not allocated"):
        a.free([0, 5])  # one good slot, one bad: nothing is freed
    with pytest.raises(TypeError, match="free_index"):
        a.free(torch.tensor([0.0]))
    assert state(a) == before


def test_allocator_bad_arguments():
    with pytest.raises(ValueError, match="page_size"):
        TokenToKVPoolAllocator(8, 0)
    with pytest.raises(ValueError, match="multiple of page_size"):
        TokenToKVPoolAllocator(10, 4)
    with pytest.raises(TypeError, match="size"):
        TokenToKVPoolAllocator(8.0)
    a = TokenToKVPoolAllocator(8, 4)
    before = state(a)
    with pytest.raises(ValueError, match="need_size must be a multiple"):
        a.alloc(3)
    with pytest.raises(ValueError, match="need_size"):
        a.alloc(-4)
    with pytest.raises(ValueError, match="last_loc"):
        a.alloc_extend(3, 2, 1)  # page 0 is not allocated
    assert state(a) == before


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3)), max_size=40), st.sampled_from([1, 2, 4]))
@settings(max_examples=80, deadline=None)
def test_allocator_against_a_set_model(ops, page_size):
    a = TokenToKVPoolAllocator(16, page_size)
    held: list[list[int]] = []
    for do_alloc, n in ops:
        if do_alloc:
            got = a.alloc(n * page_size)
            if n * page_size > 16 - sum(map(len, held)):
                assert got is None
            else:
                held.append(got.tolist())
        elif held:
            a.free(held.pop(n % len(held)))
        owned = [s for h in held for s in h]
        assert len(owned) == len(set(owned))
        assert a.available_size() + len(owned) == 16
    for h in held:
        a.free(h)
    assert a.available_size() == 16


def test_req_to_token_pool_rows():
    p = ReqToTokenPool(2, 8)
    r0, r1 = p.alloc(), p.alloc()
    assert (r0, r1) == (0, 1) and p.available_size() == 0
    p.write(r1, 2, torch.tensor([7, 8]))
    assert p.row(r1, 4).tolist() == [0, 0, 7, 8]
    with pytest.raises(RuntimeError, match="full"):
        p.alloc()
    p.free(r0)
    assert p.available_size() == 1 and p.alloc() == 0


def test_req_to_token_pool_errors_change_nothing():
    p = ReqToTokenPool(2, 4)
    r = p.alloc()
    before = (list(p.free_slots), p.req_to_token.clone())
    with pytest.raises(ValueError, match="not in use"):
        p.free(1)
    with pytest.raises(ValueError, match="req_pool_idx must be < 2"):
        p.free(5)
    with pytest.raises(ValueError, match="overflows max_context_len"):
        p.write(r, 2, [1, 2, 3])
    with pytest.raises(ValueError, match="not a row in use"):
        p.write(1, 0, [1])
    with pytest.raises(TypeError, match="slots"):
        p.write(r, 0, "ab")
    assert p.free_slots == before[0] and torch.equal(p.req_to_token, before[1])
    p.free(r)
    with pytest.raises(ValueError, match="not in use"):
        p.free(r)
    with pytest.raises(ValueError, match="max_context_len"):
        ReqToTokenPool(2, 0)


def test_complex_indices_are_refused_with_a_clear_error():
    from radixlab.mem_cache import TokenToKVPoolAllocator

    alloc = TokenToKVPoolAllocator(8)
    with pytest.raises(TypeError, match="free_index"):
        alloc.free(torch.tensor([1 + 0j]))
    pool = ReqToTokenPool(1, 4)
    row = pool.alloc()
    with pytest.raises(TypeError, match="slots"):
        pool.write(row, 0, torch.tensor([1 + 0j]))


# -- slots are checked where they enter a request row --------------------------------------------


@pytest.mark.parametrize("bad, match", [([3, -1], "slot -1"), ([3, 16], "slot 16, outside"),
                                        ([3, 9], "not handed out"), (torch.tensor([3, 12]), "not handed out")])
def test_write_refuses_slots_the_allocator_did_not_hand_out(bad, match):
    alloc = TokenToKVPoolAllocator(16, 4)
    pool = ReqToTokenPool(2, 8, token_to_kv_pool_allocator=alloc)
    alloc.alloc(4)  # page 0: slots 0..3
    row = pool.alloc()
    before = pool.req_to_token.clone()
    with pytest.raises(ValueError, match=match):
        pool.write(row, 0, bad)
    assert torch.equal(pool.req_to_token, before)
    pool.write(row, 0, [0, 1, 2, 3])


def test_write_without_an_allocator_still_refuses_negative_slots():
    pool = ReqToTokenPool(1, 4)
    with pytest.raises(ValueError, match="slot -2"):
        pool.write(pool.alloc(), 0, torch.tensor([1, -2]))
