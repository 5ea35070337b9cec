"""The request lifecycle never leaks: a Hypothesis state machine over random interleavings of
admit / extend / decode / chunked step / finish / evict, page sizes 1 and 4, every eviction policy.

After every step: the size counters add up, every KV page is in exactly one place (the allocator's
free list, one tree node, or one live request's own tail), lock counts match the live requests,
lock_ref never grows going down, the root is intact. At the end: finish everything, evict
everything, and the allocator holds every slot again.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from radixlab.mem_cache import RadixCache, RadixKey, ReqToTokenPool, Request, TokenToKVPoolAllocator, admit, extend, release

PREFIXES = [(), (1, 2, 3, 4, 5, 6, 7, 8), (1, 2, 3, 4, 9, 9), (5, 5, 5, 5, 5, 5, 5, 5, 5, 5)]
tails = st.lists(st.integers(0, 4), min_size=1, max_size=10)


def path_slots(cache: RadixCache, node) -> list[int]:
    parts = []
    while node is not cache.root_node:
        parts.append(node.value.tolist())
        node = node.parent
    return [s for part in reversed(parts) for s in part]


def check_ownership(cache: RadixCache, live: list[Request]) -> None:
    """Every page is in exactly one place; rows agree with the tree; locks match live requests."""
    alloc, pool, ps = cache.token_to_kv_pool_allocator, cache.req_to_token_pool, cache.page_size
    owner: dict[int, str] = {p: "free" for p in alloc.free_pages}
    assert len(owner) == len(alloc.free_pages), "a page is twice in the free list"

    def claim(page: int, who: str) -> None:
        assert owner.get(page, who) == who, f"page {page} owned by {owner[page]} and {who}"
        owner[page] = who

    for node in cache.nodes():
        slots = node.value.tolist()
        assert len(slots) % ps == 0
        for i in range(0, len(slots), ps):  # a tree node holds whole, aligned pages
            page = slots[i:i + ps]
            assert page == list(range(page[0], page[0] + ps)) and page[0] % ps == 0, f"node {node.id}: ragged page"
            claim(page[0] // ps, f"node {node.id}")
    expected_lock = {id(n): 0 for n in cache.nodes()}
    for req in live:
        row = pool.req_to_token[req.req_pool_idx, :req.seq_len].tolist()
        assert [s % ps for s in row] == [p % ps for p in range(len(row))], "page offset broken"
        assert row[:req.cache_protected_len] == path_slots(cache, req.last_node), "row head != tree slots"
        for page in dict.fromkeys(s // ps for s in row[req.cache_protected_len:]):
            claim(page, f"request {req.rid}")
        assert req.fill_ids == req.all_ids[:req.seq_len]
        node = req.last_node
        while node is not cache.root_node:
            expected_lock[id(node)] += 1
            node = node.parent
    assert sorted(owner) == list(range(alloc.num_pages)), "a page is nowhere: leaked"
    assert {p for p, who in owner.items() if who != "free"} == alloc.pages_in_use()
    for node in cache.nodes():
        assert node.lock_ref == expected_lock[id(node)], f"node {node.id}: lock_ref {node.lock_ref}"


class Lifecycle(RuleBasedStateMachine):
    @initialize(page_size=st.sampled_from([1, 4]), policy=st.sampled_from(["lru", "lfu", "fifo", "priority"]))
    def setup(self, page_size: int, policy: str) -> None:
        self.alloc = TokenToKVPoolAllocator(48, page_size)
        self.pool = ReqToTokenPool(4, 64)
        self.cache = RadixCache(page_size, token_to_kv_pool_allocator=self.alloc,
                                req_to_token_pool=self.pool, eviction_policy=policy)
        self.live: list[Request] = []
        self.n = 0

    def _pick(self, data, pred=lambda r: True) -> Request | None:
        options = [r for r in self.live if pred(r)]
        return data.draw(st.sampled_from(options)) if options else None

    @rule(prefix=st.sampled_from(PREFIXES), tail=tails, ns=st.sampled_from([None, "lora-A"]),
          chunk=st.one_of(st.none(), st.integers(1, 6)), priority=st.integers(0, 2))
    def new_request(self, prefix, tail, ns, chunk, priority) -> None:
        req = Request(f"r{self.n}", list(prefix) + tail, extra_key=ns, priority=priority)
        self.n += 1
        if self.pool.available_size() == 0:
            with pytest.raises(RuntimeError, match="full"):
                admit(req, self.cache)
            return
        admit(req, self.cache)
        self.live.append(req)
        ok = extend(req, self.cache, None if chunk is None else min(chunk, len(req.origin_input_ids) - req.seq_len))
        if not ok:  # no memory even after evicting: give up (the cache keeps what it had)
            release(req, self.cache)
            self.live.remove(req)

    @rule(data=st.data(), n=st.integers(1, 5))
    def decode(self, data, n) -> None:
        req = self._pick(data, lambda r: r.seq_len == len(r.all_ids))
        if req is None:
            return
        before = list(req.output_ids)
        req.output_ids += data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
        if not extend(req, self.cache, n):
            req.output_ids = before

    @rule(data=st.data(), n=st.integers(1, 6))
    def chunked_step(self, data, n) -> None:
        req = self._pick(data)
        if req is None:
            return
        n = min(n, len(req.origin_input_ids) - req.seq_len)
        if n > 0 and not extend(req, self.cache, n):
            return
        self.cache.cache_unfinished_req(req, chunked=True)

    @rule(data=st.data())
    def finish(self, data) -> None:
        req = self._pick(data)
        if req is not None:
            release(req, self.cache)
            self.live.remove(req)

    @rule(n=st.integers(0, 40))
    def evict(self, n) -> None:
        before = self.cache.evictable_size()
        freed = self.cache.evict(n)
        assert freed >= min(n, before) and self.cache.evictable_size() == before - freed

    @invariant()
    def nothing_leaks(self) -> None:
        if not hasattr(self, "cache"):
            return
        c = self.cache
        c.check_invariants()
        assert c.evictable_size() + c.protected_size() == c.total_size()
        assert c.root_node.value is not None and c.root_node.lock_ref == 1 and not c.root_node.evicted
        check_ownership(c, self.live)

    def teardown(self) -> None:
        if not hasattr(self, "cache"):
            return
        for req in list(self.live):
            release(req, self.cache)
        self.live.clear()
        assert self.cache.protected_size() == 0
        self.cache.evict(10**9)
        assert self.cache.total_size() == 0 and self.cache.evictable_size() == 0
        assert self.alloc.available_size() == self.alloc.size, "slots leaked"
        assert self.pool.available_size() == self.pool.size, "request rows leaked"


Lifecycle.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                       suppress_health_check=[HealthCheck.too_slow])
TestLifecycle = Lifecycle.TestCase


# -- a few fixed stories, readable on their own -------------------------------------------------


def make(page_size=1, size=32, rows=4):
    alloc = TokenToKVPoolAllocator(size, page_size)
    pool = ReqToTokenPool(rows, 64)
    return RadixCache(page_size, token_to_kv_pool_allocator=alloc, req_to_token_pool=pool), alloc, pool


def test_finished_request_hands_its_kv_to_the_tree():
    cache, alloc, pool = make()
    req = Request("a", [1, 2, 3, 4, 5])
    assert admit(req, cache) == 0 and extend(req, cache)
    slots = pool.row(req.req_pool_idx, 5).tolist()
    release(req, cache)
    assert cache.match_prefix([1, 2, 3, 4, 5]).device_indices.tolist() == slots
    assert cache.protected_size() == 0 and cache.evictable_size() == 5
    assert alloc.available_size() == 32 - 5 and pool.available_size() == 4


def test_second_request_reuses_and_locks_the_prefix():
    cache, alloc, pool = make()
    a = Request("a", [1, 2, 3, 4, 5])
    admit(a, cache), extend(a, cache), release(a, cache)
    b = Request("b", [1, 2, 3, 4, 9, 9])
    assert admit(b, cache) == 4  # [1,2,3,4] cached (the match splits the edge)
    assert cache.protected_size() == 4 and cache.evict(100) == 1  # only the unlocked [5] goes
    extend(b, cache)
    release(b, cache)
    assert cache.protected_size() == 0 and cache.total_size() == 6


def test_duplicates_are_freed_when_two_requests_compute_the_same_tokens():
    cache, alloc, pool = make()
    a, b = Request("a", [7, 7, 7, 7]), Request("b", [7, 7, 7, 7])
    for r in (a, b):
        admit(r, cache), extend(r, cache)
    assert alloc.available_size() == 32 - 8
    release(a, cache)
    release(b, cache)  # b's 4 slots duplicate a's: freed
    assert alloc.available_size() == 32 - 4 and cache.total_size() == 4


def test_unaligned_tail_is_freed_with_pages():
    cache, alloc, pool = make(page_size=4)
    r = Request("a", list(range(10)))
    admit(r, cache), extend(r, cache)
    assert alloc.available_size() == 32 - 12  # 3 pages
    release(r, cache)
    assert cache.total_size() == 8 and alloc.available_size() == 32 - 8


def test_chunked_prefill_moves_the_lock_down():
    cache, alloc, pool = make(page_size=4)
    r = Request("a", list(range(11)))
    admit(r, cache)
    extend(r, cache, 6)
    cache.cache_unfinished_req(r, chunked=True)
    assert r.cache_protected_len == 4 and len(r.prefix_indices) == 6 and r.last_node.lock_ref == 1
    extend(r, cache, 3)
    cache.cache_unfinished_req(r, chunked=True)
    assert r.cache_protected_len == 8 and cache.protected_size() == 8 and cache.evictable_size() == 0
    extend(r, cache)
    release(r, cache)
    assert cache.protected_size() == 0 and alloc.available_size() == 32 - 8


def test_extend_evicts_when_the_pool_is_short_and_fails_cleanly_when_all_is_locked():
    cache, alloc, pool = make(size=8)
    a = Request("a", [1, 2, 3, 4, 5, 6])
    admit(a, cache), extend(a, cache), release(a, cache)
    b = Request("b", [9, 9, 9, 9, 9])
    admit(b, cache)
    assert extend(b, cache)  # 2 free + evicts a's leaf
    assert cache.total_size() == 0
    c = Request("c", [8, 8, 8, 8])
    admit(c, cache)
    before = alloc.available_size()
    assert extend(c, cache) is False and alloc.available_size() == before and c.seq_len == 0
    release(c, cache), release(b, cache)
    cache.evict(100)
    assert alloc.available_size() == 8


@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=8),
       st.sampled_from([1, 2, 4]))
@settings(max_examples=40, deadline=None)
def test_sequential_requests_always_give_every_slot_back(prompts, page_size):
    cache, alloc, pool = make(page_size=page_size, size=64)
    for i, p in enumerate(prompts):
        r = Request(str(i), p, output_ids=[3, 1])
        admit(r, cache)
        assert extend(r, cache, len(r.all_ids) - r.seq_len)
        check_ownership(cache, [r])
        release(r, cache)
        check_ownership(cache, [])
    cache.evict(10**6)
    assert alloc.available_size() == 64


# -- bad input: a clear error, and nothing changed ------------------------------------------------


def snapshot(cache, alloc, pool):
    return (cache.format(), list(alloc.free_pages), list(pool.free_slots), pool.req_to_token.clone())


def same(a, b):
    return a[:3] == b[:3] and torch.equal(a[3], b[3])


def test_dec_lock_ref_on_unlocked_node_raises_and_changes_nothing():
    cache, alloc, pool = make()
    r = Request("a", [1, 2, 3])
    admit(r, cache), extend(r, cache), release(r, cache)
    node = cache.match_prefix([1, 2, 3]).last_node
    before = snapshot(cache, alloc, pool)
    with pytest.raises(ValueError, match="not locked"):
        cache.dec_lock_ref(node)
    assert same(before, snapshot(cache, alloc, pool))


def test_lock_on_evicted_node_raises():
    cache, alloc, pool = make()
    r = Request("a", [1, 2, 3])
    admit(r, cache), extend(r, cache), release(r, cache)
    node = cache.match_prefix([1, 2, 3]).last_node
    cache.evict(100)
    before = snapshot(cache, alloc, pool)
    with pytest.raises(ValueError, match="evicted"):
        cache.inc_lock_ref(node)
    assert same(before, snapshot(cache, alloc, pool))


def test_releasing_twice_raises_and_changes_nothing():
    cache, alloc, pool = make()
    r = Request("a", [1, 2, 3])
    admit(r, cache), extend(r, cache), release(r, cache)
    before = snapshot(cache, alloc, pool)
    with pytest.raises(ValueError, match="no row"):
        release(r, cache)
    with pytest.raises(ValueError, match="no live row"):
        cache.cache_finished_req(r)
    with pytest.raises(ValueError, match="no live row"):
        cache.cache_unfinished_req(r)
    assert same(before, snapshot(cache, alloc, pool))


def test_bad_kv_len_to_handle_raises_and_changes_nothing():
    cache, alloc, pool = make()
    r = Request("a", [1, 2, 3, 4])
    admit(r, cache), extend(r, cache)
    before = snapshot(cache, alloc, pool)
    for bad in (-1, 5, "3"):
        with pytest.raises((TypeError, ValueError), match="kv_len_to_handle"):
            cache.cache_finished_req(r, kv_len_to_handle=bad)
    assert same(before, snapshot(cache, alloc, pool))


def test_cache_req_without_pools_raises():
    cache = RadixCache()
    r = Request("a", [1, 2])
    r.req_pool_idx = 0
    with pytest.raises(ValueError, match="req_to_token_pool"):
        cache.cache_finished_req(r)
    with pytest.raises(TypeError, match="Request"):
        make()[0].cache_finished_req(object())
    with pytest.raises(ValueError, match="admit"):
        extend(Request("b", [1]), make()[0])


def test_admit_when_rows_are_full_raises_and_changes_nothing():
    cache, alloc, pool = make(rows=1)
    admit(Request("a", [1, 2]), cache)
    before = snapshot(cache, alloc, pool)
    with pytest.raises(RuntimeError, match="full"):
        admit(Request("b", [3, 4]), cache)
    assert same(before, snapshot(cache, alloc, pool))


def test_extend_bad_num_tokens_raises_and_changes_nothing():
    cache, alloc, pool = make()
    r = Request("a", [1, 2, 3])
    admit(r, cache)
    before = snapshot(cache, alloc, pool)
    for bad in (-1, 4, 1.5):
        with pytest.raises((TypeError, ValueError), match="num_tokens"):
            extend(r, cache, bad)
    assert same(before, snapshot(cache, alloc, pool))


def test_evict_and_lock_bad_arguments_change_nothing():
    cache, alloc, pool = make()
    r = Request("a", [1, 2, 3])
    admit(r, cache), extend(r, cache), release(r, cache)
    other, _, _ = make()
    other.insert([4, 5])
    before = snapshot(cache, alloc, pool)
    with pytest.raises(ValueError, match="num_tokens"):
        cache.evict(-1)
    with pytest.raises(TypeError, match="num_tokens"):
        cache.evict(2.0)
    with pytest.raises(ValueError, match="does not belong"):
        cache.inc_lock_ref(next(other.nodes()))
    with pytest.raises(TypeError, match="TreeNode"):
        cache.dec_lock_ref("node")
    assert same(before, snapshot(cache, alloc, pool))


def test_finish_without_insert_frees_all_own_slots():
    cache, alloc, pool = make()
    a = Request("a", [1, 2, 3])
    admit(a, cache), extend(a, cache), release(a, cache)
    b = Request("b", [1, 2, 3, 4, 5])
    admit(b, cache), extend(b, cache)
    nodes = lambda: [(n.key.token_ids, n.value.tolist()) for n in cache.nodes()]
    before = nodes()
    cache.cache_finished_req(b, is_insert=False)  # e.g. an aborted request: nothing enters the tree
    pool.free(b.req_pool_idx)
    assert nodes() == before
    assert cache.total_size() == 3 and cache.protected_size() == 0 and alloc.available_size() == 32 - 3


def test_packed_prompt_follows_a_replaced_origin_input_ids():
    from radixlab.mem_cache import Request

    req = Request("r", [1, 2, 3])
    assert req.admit_key().token_ids == (1, 2)
    req.origin_input_ids = [7, 8, 9]  # same length, a new list: packed again
    assert req.admit_key().token_ids == (7, 8) and req.packed_ids(3) == RadixKey([7, 8, 9]).packed
