"""Workload generators: seeded, documented shapes, clear errors on bad parameters."""

from __future__ import annotations

import pytest

from radixlab.sim.workloads import (WORKLOADS, TraceRequest, few_shot, ideal_hit_rate, multi_turn_chat,
                                shared_system_prompt, working_set_tokens)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_same_seed_same_trace_other_seed_other_trace(name):
    gen = WORKLOADS[name]
    assert gen(seed=1) == gen(seed=1)
    assert gen(seed=1) != gen(seed=2)
    assert all(isinstance(r, TraceRequest) and r.prompt_ids and r.output_ids for r in gen())


def test_shared_system_prompt_shape():
    trace = shared_system_prompt(num_requests=50, num_prompts=3, system_len=40, seed=0)
    systems = {r.prompt_ids[:40] for r in trace}
    assert len(trace) == 50 and len(systems) <= 3
    assert all(8 <= len(r.prompt_ids) - 40 <= 24 for r in trace)


def test_multi_turn_chat_each_turn_extends_the_previous_one():
    trace = multi_turn_chat(num_conversations=4, turns=3, seed=0)
    assert len(trace) == 12
    history: dict = {}
    turns: dict = {}
    for r in trace:
        conv, turn = r.label.split()
        assert int(turn[4:]) == turns.get(conv, 0) + 1  # turn order kept
        if conv in history:
            assert r.prompt_ids[: len(history[conv])] == history[conv]  # previous prompt + reply
        history[conv], turns[conv] = r.prompt_ids + r.output_ids, int(turn[4:])
    assert len({r.label.split()[0] for r in trace[:6]}) > 1  # conversations interleave


def test_few_shot_requests_of_a_task_share_the_examples():
    trace = few_shot(num_requests=30, num_tasks=2, shots=3, instruction_len=10, example_len=(5, 5), seed=0)
    by_task: dict = {}
    for r in trace:
        by_task.setdefault(r.label.split()[0], set()).add(r.prompt_ids[: 10 + 15])
    assert all(len(heads) == 1 for heads in by_task.values())


def test_working_set_and_ideal_hit_rate_on_a_tiny_trace():
    trace = [TraceRequest((1, 2, 3), (4,)), TraceRequest((1, 2, 3, 4, 5), (6,)), TraceRequest((1, 2, 9), (7,), "ns")]
    assert working_set_tokens(trace) == 6 + 4
    # request 2 hits [1,2,3,4] of its prompt[:-1]; the other two miss (new, or another namespace)
    assert ideal_hit_rate(trace) == pytest.approx(4 / 11)


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_requests=0), "num_requests"), (dict(question_len=(5, 2)), "question_len"),
    (dict(system_len=2.5), "system_len"), (dict(num_prompts=True), "num_prompts")])
def test_bad_parameters_raise(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        shared_system_prompt(**kwargs)


def test_bad_parameters_other_generators():
    with pytest.raises(ValueError, match="turns"):
        multi_turn_chat(turns=0)
    with pytest.raises(ValueError, match="example_len"):
        few_shot(example_len=(0, 3))
