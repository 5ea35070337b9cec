"""The hit-rate simulator drives the real cache; Belady's oracle knows the future and uses it."""

from __future__ import annotations

import math

import pytest

from radixlab.sim.eviction_sim import (POLICIES, NextUse, bookkeeping_costs, capacity_grid, gap_table, simulate,
                                   sweep)
from radixlab.mem_cache import RadixCache
from radixlab.sim.workloads import TraceRequest, few_shot, ideal_hit_rate, multi_turn_chat, working_set_tokens

A, B, C = (1, 1, 1, 1), (2, 2, 2, 2), (3, 3, 3, 3)


def tr(*prompts):
    return [TraceRequest(p, ()) for p in prompts]


def test_lru_forgets_what_belady_keeps():
    trace = tr(A, B, C, A)  # room for two sequences: at C, LRU drops A; Belady drops B (never used again)
    lru, opt = simulate(trace, 8, "lru"), simulate(trace, 8, "belady")
    assert lru.hit_tokens == 0 and opt.hit_tokens == 3  # A's prompt[:-1]
    assert opt.prompt_tokens == 16 and opt.hit_rate == pytest.approx(3 / 16)


def test_next_use_oracle():
    trace = tr(A, B, A + (5,), B)
    cache = RadixCache()
    cache.insert(A)
    node = cache.match_prefix(A).last_node
    oracle = NextUse(trace)
    oracle.now = 0
    assert oracle.next_use(node) == 2
    oracle.now = 2
    assert oracle.next_use(node) == math.inf and oracle(node) == -math.inf


@pytest.mark.parametrize("page_size", [1, 4])
def test_unbounded_cache_reaches_the_ideal_hit_rate(page_size):
    trace = multi_turn_chat(num_conversations=4, turns=3, seed=3)
    cap = -(-working_set_tokens(trace) // page_size) * page_size + 64
    for policy in POLICIES:
        r = simulate(trace, cap, policy, page_size)
        if page_size == 1:
            assert r.hit_rate == pytest.approx(ideal_hit_rate(trace))
        assert r.evicted_tokens == 0


def test_belady_is_at_least_as_good_as_the_online_policies_on_the_course_workloads():
    trace = few_shot(num_requests=60, seed=1)
    results = sweep(trace, capacity_grid(trace, [0.1, 0.3, 0.6]), progress=False)
    for i in range(3):
        best_online = max(results[p][i].hit_rate for p in ("lru", "lfu", "fifo"))
        assert results["belady"][i].hit_rate >= best_online
    rows = gap_table(results)
    assert len(rows) == 3 and all(gap >= 0 for *_, gap in rows)


def test_simulate_is_deterministic_and_validates():
    trace = few_shot(num_requests=20, seed=0)
    cap = capacity_grid(trace, [0.2])[0]
    assert simulate(trace, cap, "lru") == simulate(trace, cap, "lru")
    with pytest.raises(ValueError, match="policy"):
        simulate(trace, cap, "random")
    with pytest.raises(ValueError, match="capacity"):
        simulate(trace, 3, "lru")
    with pytest.raises(ValueError, match="capacity"):
        simulate(trace, cap + 1, "lru", page_size=4) if (cap + 1) % 4 else simulate(trace, cap + 2, "lru", 4)


def test_capacity_grid_never_below_the_longest_request():
    trace = tr(A + B + C, A)
    assert capacity_grid(trace, [0.0, 0.5, 1.0]) == [12, 12, 12]


def test_bookkeeping_costs_count_the_heap_and_the_touches():
    trace = tr(A, B, C, A)
    costs = bookkeeping_costs(trace, 8)
    # A, B fill the pool; C evicts A (heap of A, B), A again evicts B (heap of B, C); one new leaf each
    assert costs == dict(requests=4, node_touches=4, evict_calls=2, heap_built=4, heap_pops=2, parent_pushes=0)


def test_bookkeeping_costs_count_parent_pushes_and_ignore_empty_matches():
    chain = tr((7, 7, 7, 7), (7, 7, 7, 7, 8, 8, 8, 8), (9,) * 8)  # the last one evicts [8888], then its parent
    costs = bookkeeping_costs(chain, 8)
    assert (costs["evict_calls"], costs["heap_built"], costs["heap_pops"], costs["parent_pushes"]) == (1, 1, 2, 1)
    one_token = tr((5,), (5,), (5,), (5,))  # their match keys are empty: only the inserts touch a node
    assert bookkeeping_costs(one_token, 4)["node_touches"] == 4
