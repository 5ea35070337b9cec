"""RadixKey indexed with an int: SGLang's semantics (a one-unit key, namespace kept, IndexError)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixlab.mem_cache import RadixKey


def test_an_int_index_is_a_one_unit_key_in_the_same_namespace():
    key = RadixKey([5, 6, 7], "lora-a")
    assert key[0] == RadixKey([5], "lora-a")
    assert key[2] == RadixKey([7], "lora-a") and len(key[1]) == 1


def test_negative_indices_count_from_the_end():
    key = RadixKey([5, 6, 7])
    assert key[-1] == RadixKey([7]) and key[-3] == RadixKey([5])


@pytest.mark.parametrize("i", [3, -4, 100])
def test_out_of_range_raises_index_error(i):
    with pytest.raises(IndexError, match="out of range"):
        RadixKey([5, 6, 7])[i]
    with pytest.raises(IndexError):
        RadixKey([])[0]


def test_the_bigram_view_keeps_its_two_raw_tokens():
    key = RadixKey([5, 6, 7], "ns", is_bigram=True)  # units (5, 6), (6, 7)
    assert len(key) == 2
    unit = key[1]
    assert unit.token_ids == (6, 7) and unit.units == ((6, 7),) and unit.is_bigram and unit.extra_key == "ns"
    assert key[-2].token_ids == (5, 6)
    with pytest.raises(IndexError):
        key[2]


def test_other_indices_are_refused():
    key = RadixKey([1, 2])
    for bad in ("0", 1.0, None, (0,)):
        with pytest.raises(TypeError, match="int or a slice"):
            key[bad]


@given(st.lists(st.integers(-5, 5), min_size=1, max_size=8), st.booleans(), st.data())
def test_int_index_equals_the_one_unit_slice(tokens, bigram, data):
    key = RadixKey(tokens, "x", is_bigram=bigram)
    if len(key) == 0:
        return
    i = data.draw(st.integers(-len(key), len(key) - 1))
    j = i % len(key)
    assert key[i] == key[j:j + 1] and list(key[i]) == [key.units[i]]
