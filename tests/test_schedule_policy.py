"""Scheduling policies (radixlab.engine.schedule_policy): SGLang's orderings, the LPM fallback, the in-batch check."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlab.engine.schedule_policy import (LPM_FALLBACK_QUEUE_LEN, POLICIES, SimRequest, active_policy,
                                      compute_prefix_matches, order_queue, validate_policy)
from radixlab.mem_cache import RadixCache, RadixKey


def rids(decision):
    return [r.rid for r in decision.order]


def tree_with(*paths, extra_key=None):
    cache = RadixCache()
    for p in paths:
        cache.insert(RadixKey(list(p), extra_key))
    return cache


def test_unknown_policy_is_a_value_error_naming_the_argument():
    with pytest.raises(ValueError, match="schedule_policy must be one of fcfs, lpm, dfs-weight, lof, random"):
        validate_policy("LPM")
    with pytest.raises(ValueError, match="schedule_policy"):
        order_queue("sjf", [], RadixCache())


def test_lpm_sorts_by_cached_prefix_and_keeps_arrival_order_on_ties():
    tree = tree_with([1, 2, 3, 4, 5, 6], [7, 8])
    queue = [SimRequest("a", (9, 9)), SimRequest("b", (7, 8, 1)), SimRequest("c", (1, 2, 3, 4, 0)),
             SimRequest("d", (1, 2, 3, 4, 5, 6, 0)), SimRequest("e", (7, 8, 2))]
    d = order_queue("lpm", queue, tree)
    assert rids(d) == ["d", "c", "b", "e", "a"]
    assert d.prefix_len == {"a": 0, "b": 2, "c": 4, "d": 6, "e": 2}
    assert [r.rid for r in queue] == list("abcde")  # the caller's queue is not reordered


def test_lpm_respects_namespaces():
    tree = tree_with([1, 2, 3, 4], extra_key="tenant-A")
    queue = [SimRequest("b", (1, 2, 3, 4, 5), extra_key="tenant-B"), SimRequest("a", (1, 2, 3, 4, 5), extra_key="tenant-A")]
    assert rids(order_queue("lpm", queue, tree)) == ["a", "b"]


def test_lpm_falls_back_to_fcfs_over_128_waiting_requests():
    tree = tree_with([5] * 10)
    for n, expected in ((LPM_FALLBACK_QUEUE_LEN, "lpm"), (LPM_FALLBACK_QUEUE_LEN + 1, "fcfs")):
        queue = [SimRequest(i, (i + 100, 1)) for i in range(n - 1)] + [SimRequest("hit", (5,) * 10 + (1,))]
        d = order_queue("lpm", queue, tree, in_batch_check=False)
        assert d.active_policy == expected
        assert d.matches == (n if expected == "lpm" else 0)  # the cost the fallback avoids
        assert (rids(d)[0] == "hit") == (expected == "lpm")
    assert active_policy("dfs-weight", 10_000) == "dfs-weight"  # only LPM falls back (as in SGLang)


def test_cache_aware_policies_without_a_tree_serve_fcfs():
    queue = [SimRequest(i, (i, 1)) for i in range(3)]
    for policy in ("lpm", "dfs-weight"):
        d = order_queue(policy, queue, None)
        assert d.active_policy == "fcfs" and rids(d) == [0, 1, 2]


def test_dfs_weight_walks_the_heaviest_subtree_first_and_emits_a_node_after_its_subtree():
    # tree: root ─ [1,2] ─┬─ [3,4]     root ─ [7,8]
    #                     └─ [5,6]
    tree = tree_with([1, 2, 3, 4], [1, 2, 5, 6], [7, 8])
    queue = [SimRequest("x78", (7, 8, 0)), SimRequest("x12", (1, 2, 0)), SimRequest("x56", (1, 2, 5, 6, 0)),
             SimRequest("y56", (1, 2, 5, 6, 9)), SimRequest("x34", (1, 2, 3, 4, 0)), SimRequest("none", (4, 4))]
    d = order_queue("dfs-weight", queue, tree)
    # weights: [1,2] subtree 4 (x12, x56, y56, x34) > [7,8] 1; inside [1,2]: [5,6] (2) before [3,4] (1);
    # requests whose match ends at [1,2] come after its children; the root's own ("none") come last.
    assert rids(d) == ["x56", "y56", "x34", "x12", "x78", "none"]


def test_lof_and_random():
    queue = [SimRequest("a", (1,), max_new_tokens=4), SimRequest("b", (2,), max_new_tokens=9),
             SimRequest("c", (3,), max_new_tokens=4)]
    assert rids(order_queue("lof", queue, None)) == ["b", "a", "c"]
    r1 = rids(order_queue("random", queue * 1, None, random.Random(3)))
    assert r1 == rids(order_queue("random", queue, None, random.Random(3)))
    assert sorted(r1) == ["a", "b", "c"]


def test_in_batch_check_deprioritizes_the_second_request_sharing_an_uncached_prefix():
    shared = tuple(range(100, 140))  # 40 tokens, not in the tree
    queue = [SimRequest("first", shared + (1,)), SimRequest("other", (7,) * 50),
             SimRequest("second", shared + (2,)), SimRequest("short", shared[:31] + (3,))]
    d = order_queue("lpm", queue, RadixCache())
    assert d.deprioritized == {"second"}  # 40 >= 32 shared with "first"; "short" shares only 31
    assert rids(d)[-1] == "second"
    # Once the prefix is cached (> 32 tokens), the check no longer applies: it is a plain hit.
    d = order_queue("lpm", queue, tree_with(shared))
    assert d.deprioritized == set() and rids(d)[:3] == ["first", "second", "short"]
    assert order_queue("lpm", queue, RadixCache(), in_batch_check=False).deprioritized == set()


def test_compute_prefix_matches_returns_the_nodes_where_matches_end():
    tree = tree_with([1, 2, 3, 4])
    plen, last, _ = compute_prefix_matches([SimRequest("a", (1, 2, 9))], tree)
    assert plen == {"a": 2} and list(last["a"].key.token_ids) == [1, 2]  # the edge was split at the match
    tree.check_invariants()


def test_two_requests_with_one_rid_are_rejected():
    with pytest.raises(ValueError, match="same rid"):
        order_queue("fcfs", [SimRequest(1, (1,)), SimRequest(1, (2,))], None)


queues = st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=8), min_size=0, max_size=10)
trees = st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=8), max_size=4)


@settings(max_examples=60, deadline=None)
@given(queues, trees, st.sampled_from(POLICIES))
def test_every_policy_returns_a_permutation_and_leaves_the_tree_sound(prompts, paths, policy):
    tree = tree_with(*paths)
    queue = [SimRequest(i, tuple(p), max_new_tokens=len(p)) for i, p in enumerate(prompts)]
    d = order_queue(policy, queue, tree, random.Random(0))
    assert sorted(rids(d)) == list(range(len(prompts)))
    tree.check_invariants()
    if policy == "lpm":  # longest prefix first, except the deprioritized at the end
        keys = [d.prefix_len[r.rid] for r in d.order if r.rid not in d.deprioritized]
        assert keys == sorted(keys, reverse=True)
