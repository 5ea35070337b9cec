"""Figure 4-1 live: the eviction-state drawing, the evict frames and the request-life frames."""

from __future__ import annotations

import pytest

from radixlab.mem_cache import RadixCache, ReqToTokenPool, Request, TokenToKVPoolAllocator, admit, extend, release
from radixlab.viz.eviction import (draw_eviction_state, evict_frames, format_heap, heap_order, lifecycle_frames,
                                   traced_evict)


def cache_with(*prompts, size=32):
    alloc, pool = TokenToKVPoolAllocator(size), ReqToTokenPool(4, 32)
    cache = RadixCache(token_to_kv_pool_allocator=alloc, req_to_token_pool=pool)
    for i, p in enumerate(prompts):
        r = Request(str(i), p)
        admit(r, cache), extend(r, cache), release(r, cache)
    return cache


def test_heap_order_is_oldest_leaf_first_and_skips_locked_leaves():
    cache = cache_with([1, 2, 3, 4], [1, 2, 7, 8], [9, 9])
    assert [n.key.token_ids for n in heap_order(cache)] == [(3, 4), (7, 8), (9, 9)]
    cache.inc_lock_ref(cache.match_prefix([9, 9]).last_node)
    assert [n.key.token_ids for n in heap_order(cache)] == [(3, 4), (7, 8)]
    assert "1. #" in format_heap(cache) and "oldest on top" in format_heap(cache)


def test_empty_heap_says_why():
    assert "tree is empty" in format_heap(RadixCache())
    cache = cache_with([5, 5])
    cache.inc_lock_ref(cache.match_prefix([5, 5]).last_node)
    assert "every leaf is locked" in format_heap(cache)


def test_drawing_marks_locked_heap_and_evicted_nodes():
    cache = cache_with([1, 2, 3, 4], [1, 2, 7, 8])
    cache.inc_lock_ref(cache.match_prefix([1, 2, 7, 8]).last_node)
    freed, popped = traced_evict(cache, 1)
    assert freed == 2 and [n.key.token_ids for n in popped] == [(3, 4)]
    d = draw_eviction_state(cache, evicted=popped, labels={1: "a", 2: "b"})
    assert "[a b]" in d.text and "[locked]" in d.text and "evicted: #" in d.text
    assert "digraph" in d.dot_source and "dashed" in d.dot_source


def test_evict_frames_one_per_call_and_captions_say_what_was_freed():
    cache = cache_with([1, 2, 3, 4], [1, 2, 7, 8], [9, 9])
    frames = evict_frames(cache, [2, 100])
    assert len(frames) == 3
    assert frames[1].caption.startswith("evict #1: evict(2) → freed 2 tokens")
    assert "freed 6 tokens" in frames[2].caption and cache.total_size() == 0
    assert "allocator has 32 free slots" in frames[2].caption


def test_lifecycle_frames_walk_the_steps_and_leave_nothing_locked():
    cache = cache_with([1, 2, 3, 4, 5])
    alloc = cache.token_to_kv_pool_allocator
    frames = lifecycle_frames(cache, Request("B", [1, 2, 3, 9, 9]))
    captions = [f.caption for f in frames]
    assert len(frames) == 7 and captions[1].startswith("1. match_prefix → 3 tokens cached")
    assert "[locked]" in frames[2].text and "[locked]" not in frames[-1].text
    assert cache.protected_size() == 0 and alloc.available_size() == 32 - 7
    assert cache.req_to_token_pool.available_size() == 4


def test_lifecycle_frames_fail_cleanly_without_memory():
    cache = cache_with(size=4)
    cache.inc_lock_ref(cache.root_node)
    with pytest.raises(RuntimeError, match="not enough KV slots"):
        lifecycle_frames(cache, Request("big", list(range(9))))


def test_an_evicted_parent_and_child_are_both_drawn_connected():
    from radixlab.course.ex_evict import chain

    cache = chain()
    freed, popped = traced_evict(cache, 6)
    assert freed == 6 and len(popped) == 3
    dot = draw_eviction_state(cache, evicted=popped).dot_source
    for j in range(3):
        assert f"-> x{j} [style=dashed" in dot, f"evicted node x{j} has no edge"


def test_lifecycle_frames_take_no_lock_when_no_row_is_free():
    from radixlab.mem_cache import ReqToTokenPool, Request, TokenToKVPoolAllocator

    cache = RadixCache(token_to_kv_pool_allocator=TokenToKVPoolAllocator(32), req_to_token_pool=ReqToTokenPool(1, 16))
    cache.insert([1, 2, 3], cache.token_to_kv_pool_allocator.alloc(3))
    cache.req_to_token_pool.alloc()  # the only row is taken
    with pytest.raises(RuntimeError):
        lifecycle_frames(cache, Request("b", [1, 2, 3, 4]))
    assert cache.protected_size() == 0
    cache.check_invariants()


def test_lifecycle_frames_decode_real_tokens_and_cache_those_with_kv():
    """Notebook 05's step "decode": the sampled tokens but the last are fed back (slots, K/V) and cached."""
    cache = cache_with([1, 2, 3, 4, 5])
    alloc = cache.token_to_kv_pool_allocator
    req = Request("B", [1, 2, 3, 9, 9])
    frames = lifecycle_frames(cache, req, decode=[7, 8, 6])
    assert len(frames) == 8 and frames[5].caption.startswith("5. decode, 2 step(s)")
    assert req.output_ids == [7, 8, 6]
    assert cache.match_prefix([1, 2, 3, 9, 9, 7, 8, 6]).device_indices.numel() == 7  # 6 was never fed back
    assert "the 7 tokens with K/V" in frames[6].caption and "4 of them new" in frames[6].caption
    assert cache.protected_size() == 0 and alloc.available_size() == 32 - 9


def test_hit_rate_plot_is_a_grid_with_one_legend_outside_the_panels():
    """Seven workloads: two rows of four panels (the eighth hidden), one figure legend, none on a panel."""
    from types import SimpleNamespace

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from radixlab.viz.eviction import plot_hit_rates

    fractions = [0.1, 0.5, 1.0]
    results = {f"w{i}": {p: [SimpleNamespace(hit_rate=f / 2) for f in fractions] for p in ("lru", "fifo", "belady")}
               for i in range(7)}
    fig = plot_hit_rates(results, fractions, {name: 0.5 for name in results})
    try:
        axes = fig.axes
        assert len(axes) == 8 and sum(ax.get_visible() for ax in axes) == 7
        assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in axes)
        width, height = fig.get_size_inches()
        assert width / 4 >= 3 and height / 2 >= 2.5  # panels of a readable size
    finally:
        plt.close(fig)


def test_drawing_without_the_heap_hides_which_leaf_goes_first():
    cache = cache_with([1, 2, 3, 4], [1, 2, 7, 8])
    shown, hidden = draw_eviction_state(cache), draw_eviction_state(cache, show_heap=False)
    assert "[heap #1]" in shown.text and "evictable-leaf heap" in shown.text and "heap [shape=note" in shown.dot_source
    assert "[heap #" not in hidden.text and "evictable-leaf heap" not in hidden.text
    assert hidden.text.count("[unlocked leaf]") == 2 and "heap [shape=note" not in hidden.dot_source
