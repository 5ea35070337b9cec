"""MHATokenToKVPool: per-layer K/V buffers by slot; clear errors that change nothing."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlab.utils import debug
from radixlab.mem_cache import MHATokenToKVPool, TokenToKVPoolAllocator

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def make(size=16, page_size=4, device="cpu", dtype=torch.float32):
    return MHATokenToKVPool(size, page_size, dtype, head_num=2, head_dim=4, layer_num=3, device=device)


def snapshot(pool):
    return [b.clone() for b in pool.k_buffer + pool.v_buffer]


def unchanged(pool, before):
    return all(torch.equal(a, b) for a, b in zip(before, pool.k_buffer + pool.v_buffer))


@pytest.mark.parametrize("device", DEVICES)
def test_layout_and_size(device):
    pool = make(device=device)
    for layer in range(3):
        for buf in pool.get_kv_buffer(layer):
            assert buf.shape == (16, 2, 4) and buf.dtype == torch.float32 and buf.device.type == device
    assert pool.get_kv_size_bytes() == (3 * 16 * 2 * 4 * 4, 3 * 16 * 2 * 4 * 4)  # (K bytes, V bytes), as SGLang
    half = make(dtype=torch.float16)
    assert sum(half.get_kv_size_bytes()) == sum(pool.get_kv_size_bytes()) // 2


@pytest.mark.parametrize("device", DEVICES)
def test_set_writes_exactly_the_named_rows(device):
    pool = make(device=device)
    loc = torch.tensor([5, 2, 11], device=device)
    k, v = torch.randn(3, 2, 4, device=device), torch.randn(3, 2, 4, device=device)
    pool.set_kv_buffer(1, loc, k, v)
    kb, vb = pool.get_key_buffer(1), pool.get_value_buffer(1)
    assert torch.equal(kb[loc], k) and torch.equal(vb[loc], v)
    others = [s for s in range(16) if s not in (5, 2, 11)]
    assert not kb[others].any() and not vb[others].any()
    assert not pool.get_key_buffer(0).any() and not pool.get_key_buffer(2).any()  # other layers untouched


def test_slots_from_the_allocator_are_rows_of_the_pool():
    alloc, pool = TokenToKVPoolAllocator(16, 4), make()
    slots = alloc.alloc(16)
    pool.set_kv_buffer(0, slots, torch.ones(16, 2, 4), torch.ones(16, 2, 4))  # every slot handed out is a row
    assert pool.get_key_buffer(0).all()


def test_int32_loc_and_dtype_cast():
    pool = make(dtype=torch.float16)
    pool.set_kv_buffer(0, torch.tensor([0, 1], dtype=torch.int32), torch.ones(2, 2, 4), torch.ones(2, 2, 4))
    assert pool.get_key_buffer(0).dtype == torch.float16 and pool.get_key_buffer(0)[:2].all()


@pytest.mark.parametrize("loc, match", [
    (torch.tensor([0, 16]), "slot 16, outside"),
    (torch.tensor([-1, 0]), "slot -1, outside"),
    (torch.tensor([1.0, 2.0]), "loc must be a 1-D int64"),
    (torch.tensor([[1, 2]]), "loc must be a 1-D int64"),
    ([1, 2], "loc must be a 1-D int64"),
    (torch.tensor([True, False]), "loc must be a 1-D int64"),
    (torch.tensor([3, 3]), "same slot twice"),
])
def test_bad_loc_raises_and_changes_nothing(loc, match, monkeypatch):
    monkeypatch.setattr(debug, "DEBUG", True)  # the slot checks cost a device sync: debug switch only
    pool = make()
    pool.set_kv_buffer(0, torch.tensor([3]), torch.ones(1, 2, 4), torch.ones(1, 2, 4))
    before = snapshot(pool)
    with pytest.raises(ValueError, match=match):
        pool.set_kv_buffer(0, loc, torch.full((2, 2, 4), 7.0), torch.full((2, 2, 4), 7.0))
    assert unchanged(pool, before)


@pytest.mark.parametrize("k_shape, v_shape, match", [
    ((3, 2, 4), (2, 2, 4), "cache_k must have shape \\(2, 2, 4\\)"),  # length mismatch with loc
    ((2, 2, 4), (2, 1, 4), "cache_v must have shape"),
    ((2, 8), (2, 8), "cache_k must have shape"),
])
def test_bad_k_v_shapes_raise_and_change_nothing(k_shape, v_shape, match):
    pool = make()
    before = snapshot(pool)
    with pytest.raises(ValueError, match=match):
        pool.set_kv_buffer(0, torch.tensor([1, 2]), torch.ones(k_shape), torch.ones(v_shape))
    assert unchanged(pool, before)


@pytest.mark.parametrize("layer_id", [-1, 3, 1.0, True, "0", None])
def test_bad_layer_id_raises(layer_id):
    pool = make()
    before = snapshot(pool)
    for call in (lambda: pool.get_key_buffer(layer_id), lambda: pool.get_value_buffer(layer_id),
                 lambda: pool.set_kv_buffer(layer_id, torch.tensor([0]), torch.ones(1, 2, 4), torch.ones(1, 2, 4))):
        with pytest.raises((TypeError, ValueError), match="layer_id must be"):
            call()
    assert unchanged(pool, before)


@pytest.mark.parametrize("kwargs, match", [
    (dict(size=0), "size must be >= 1"),
    (dict(size=10, page_size=4), "size must be a multiple of page_size=4"),
    (dict(page_size=0), "page_size must be >= 1"),
    (dict(dtype=torch.int64), "dtype must be a floating-point"),
    (dict(head_num=0), "head_num must be >= 1"),
    (dict(head_dim=0), "head_dim must be >= 1"),
    (dict(layer_num=0), "layer_num must be >= 1"),
])
def test_bad_constructor_arguments(kwargs, match):
    args = dict(size=16, page_size=4, dtype=torch.float32, head_num=2, head_dim=4, layer_num=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        MHATokenToKVPool(**args)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.lists(st.integers(-2, 17), max_size=6)), max_size=12))
def test_against_a_dict_model(writes):
    """Any sequence of writes, valid or not, leaves the buffers equal to a dict {(layer, slot): value}
    (with the debug switch on: the slot checks are behind it)."""
    old, debug.DEBUG = debug.DEBUG, True
    try:
        _writes_against_a_dict_model(writes)
    finally:
        debug.DEBUG = old


def _writes_against_a_dict_model(writes):
    pool, model = make(), {}
    for step, (layer, slots) in enumerate(writes):
        k = torch.arange(len(slots) * 8, dtype=torch.float32).view(len(slots), 2, 4) + 100 * step
        ok = all(0 <= s < 16 for s in slots) and len(set(slots)) == len(slots)
        if ok:
            pool.set_kv_buffer(layer, torch.tensor(slots, dtype=torch.int64), k, -k)
            for i, s in enumerate(slots):
                model[(layer, s)] = k[i]
        else:
            with pytest.raises(ValueError):
                pool.set_kv_buffer(layer, torch.tensor(slots, dtype=torch.int64), k, -k)
        for layer_id in range(3):
            for s in range(16):
                want = model.get((layer_id, s), torch.zeros(2, 4))
                assert torch.equal(pool.get_key_buffer(layer_id)[s], want)
                assert torch.equal(pool.get_value_buffer(layer_id)[s], -want if (layer_id, s) in model else want)


def test_set_kv_buffer_checks_slots_only_with_the_debug_switch(monkeypatch):
    """min/max/unique on every layer would synchronise a GPU each step: they run only in debug mode."""
    pool, calls = make(), []
    monkeypatch.setattr(MHATokenToKVPool, "_check_loc", lambda self, loc: calls.append(loc))
    monkeypatch.setattr(debug, "DEBUG", False)
    pool.set_kv_buffer(0, torch.tensor([1, 2]), torch.ones(2, 2, 4), torch.ones(2, 2, 4))
    assert calls == []
    monkeypatch.setattr(debug, "DEBUG", True)
    pool.set_kv_buffer(0, torch.tensor([1, 2]), torch.ones(2, 2, 4), torch.ones(2, 2, 4))
    assert len(calls) == 1
