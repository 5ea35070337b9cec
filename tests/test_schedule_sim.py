"""The one-request-at-a-time simulator: the SGLang paper's DFS-order claim against a brute-force optimum."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlab.sim.schedule_sim import (best_order_brute_force, compare_orders, paper_dfs_order, serve_order,
                                   serve_with_policy)
from radixlab.sim.workloads import TraceRequest, generated_shared_prefix, ideal_hit_rate


def prompts_only(prompts, namespaces=None):
    return [TraceRequest(tuple(p), (), None if namespaces is None else namespaces[i]) for i, p in enumerate(prompts)]


small_traces = st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=9), min_size=1, max_size=6)


@settings(max_examples=80, deadline=None)
@given(small_traces, st.lists(st.sampled_from(["A", "B"]), min_size=6, max_size=6))
def test_dfs_order_reaches_the_brute_force_optimum_when_the_cache_holds_the_longest_request(prompts, ns):
    trace = prompts_only(prompts, ns)
    capacity = max(len(r) for r in trace)  # exactly the paper's condition: the longest request fits
    best = best_order_brute_force(trace)
    dfs = serve_order(trace, paper_dfs_order(trace), capacity)
    assert dfs.hit_tokens == best.hit_tokens
    assert dfs.hit_rate == pytest.approx(ideal_hit_rate([trace[i] for i in best.order]))


def has_prefix_pair(prompts):
    return any(i != j and b[: len(a)] == a for i, a in enumerate(prompts) for j, b in enumerate(prompts))


@settings(max_examples=60, deadline=None)
@given(small_traces)
def test_lpm_and_dfs_weight_reach_the_optimum_when_no_prompt_is_a_prefix_of_another(prompts):
    # (When one prompt is a prefix of another, LPM may serve the longer first; the shorter one then
    # recomputes its last token, which the engine always computes. tests below show that case.)
    trace = prompts_only(prompts)
    if has_prefix_pair([r.prompt_ids for r in trace]):
        return
    capacity = max(len(r) for r in trace)
    best = best_order_brute_force(trace).hit_tokens
    for policy in ("lpm", "dfs-weight"):
        assert serve_with_policy(trace, policy, capacity).hit_tokens == best


def test_lpm_loses_a_token_when_it_serves_the_longer_of_two_nested_prompts_first():
    # On a cold cache every match is 0, so LPM serves arrival order: the long prompt first. The short
    # one then finds all its tokens cached but still computes its last one (its logits are the output).
    nested = prompts_only([[5, 1, 1, 1, 2], [9, 9], [5, 1, 1, 1]])
    lpm = serve_with_policy(nested, "lpm", 5)
    assert lpm.order == (0, 2, 1) and lpm.hits == (0, 3, 0)
    best = best_order_brute_force(nested)
    assert best.hit_tokens == 4 and serve_order(nested, paper_dfs_order(nested), 5).hit_tokens == 4


def test_fcfs_thrashes_a_small_cache_that_dfs_order_does_not():
    trace = generated_shared_prefix(num_groups=4, prompts_per_group=4, system_prompt_len=64, question_len=16,
                                    output_len=8, seed=0)
    capacity = max(len(r) for r in trace)  # one request: every group switch evicts the last system prompt
    res = compare_orders(trace, capacity)
    assert res["fcfs"].hit_rate < 0.5 * res["paper-dfs"].hit_rate
    assert res["lpm"].hit_rate == res["dfs-weight"].hit_rate == res["paper-dfs"].hit_rate
    assert res["paper-dfs"].hit_rate == pytest.approx(ideal_hit_rate([trace[i] for i in paper_dfs_order(trace)]))


def test_paper_dfs_order_serves_a_prefix_before_what_extends_it():
    trace = prompts_only([[1, 2, 3], [4], [1, 2], [1, 5]])
    assert paper_dfs_order(trace) == [2, 0, 3, 1]


def test_bad_arguments():
    trace = prompts_only([[1, 2, 3]])
    with pytest.raises(ValueError, match="capacity"):
        serve_order(trace, [0], 2)
    with pytest.raises(ValueError, match="order"):
        serve_order(trace, [1], 3)
    with pytest.raises(ValueError, match="policy"):
        serve_with_policy(trace, "sjf", 3)
    with pytest.raises(ValueError, match="max_requests"):
        best_order_brute_force(prompts_only([[i] for i in range(8)]))


def test_service_frames_show_each_step():
    from radixlab.sim.schedule_sim import service_frames

    trace = prompts_only([[1, 1, 1, 5], [2, 2, 2, 5], [1, 1, 1, 6]])
    frames, res = service_frames(trace, "lpm", 4, labels=["A1", "B1", "A2"])
    assert len(frames) == 3 and frames[0].startswith("step 1 (lpm): queue A1 B1 A2  → serve A1")
    assert "→ serve A2 (cached prefix 3)" in frames[1] and res.order == (0, 2, 1)
    with pytest.raises(ValueError, match="policy"):
        service_frames(trace, "nope", 4)
