"""The serving workloads (generated-shared-prefix, tree of thought, self-consistency, random) and as_text."""

from __future__ import annotations

import pytest

from radixlab.sim.workloads import (WORKLOADS, as_text, generated_shared_prefix, ideal_hit_rate, random_prompts,
                                self_consistency, token_word, tree_of_thought)

NEW = ("generated_shared_prefix", "tree_of_thought", "self_consistency", "random_prompts")


@pytest.mark.parametrize("name", NEW)
def test_registered_seeded_and_non_empty(name):
    gen = WORKLOADS[name]
    assert gen(seed=3) == gen(seed=3) and gen(seed=3) != gen(seed=4)
    assert all(r.prompt_ids and r.output_ids for r in gen())


def test_generated_shared_prefix_groups():
    trace = generated_shared_prefix(num_groups=3, prompts_per_group=5, system_prompt_len=20, question_len=7,
                                    output_len=4, seed=0)
    assert len(trace) == 15 and all(len(r.prompt_ids) == 27 and len(r.output_ids) == 4 for r in trace)
    groups = {}
    for r in trace:
        groups.setdefault(r.label.split()[0], set()).add(r.prompt_ids[:20])
    assert len(groups) == 3 and all(len(v) == 1 for v in groups.values())
    assert [r.label for r in trace] != sorted(r.label for r in trace)  # shuffled, as bench_serving
    ordered = generated_shared_prefix(num_groups=3, prompts_per_group=5, ordered=True)
    assert [r.label.split()[0] for r in ordered] == [f"group{g}" for g in range(3) for _ in range(5)]


def test_tree_of_thought_levels_extend_their_parent_path():
    trace = tree_of_thought(num_problems=2, fan_out=(3, 2), question_len=10, seed=1)
    assert len(trace) == 2 * 3 + 2 * 3 * 2
    by_label = {r.label: r for r in trace}
    for r in trace:
        parent = r.label.rsplit(".", 1)[0]
        if parent in by_label:  # level 2: parent's prompt + the parent's output (its thought)
            p = by_label[parent]
            assert r.prompt_ids == p.prompt_ids + p.output_ids
        else:
            assert len(r.prompt_ids) == 10
    sc = self_consistency(num_problems=2, samples=4, question_len=12)
    assert len(sc) == 8 and len({r.prompt_ids for r in sc}) == 2


def test_random_prompts_share_no_prefix():
    trace = random_prompts(num_requests=50, seed=2)
    assert len({r.prompt_ids[0] for r in trace}) == 50
    assert ideal_hit_rate(trace) == 0.0
    with pytest.raises(ValueError, match="num_requests"):
        random_prompts(num_requests=11, vocab=10)


def test_bad_parameters_name_the_argument():
    with pytest.raises(ValueError, match="fan_out"):
        tree_of_thought(fan_out=())
    with pytest.raises(ValueError, match="fan_out"):
        tree_of_thought(fan_out=(2, 0))
    with pytest.raises(ValueError, match="prompts_per_group"):
        generated_shared_prefix(prompts_per_group=0)
    with pytest.raises(ValueError, match="prompt_len"):
        random_prompts(prompt_len=(5, 1))


def test_as_text_is_readable_and_keeps_prefix_sharing():
    words = [token_word(i) for i in range(5000)]
    assert len(set(words)) == 5000 and all(w.isalpha() for w in words)  # a bijection onto words
    trace = generated_shared_prefix(num_groups=1, prompts_per_group=2, system_prompt_len=8, question_len=3)
    (p1, o1), (p2, _) = as_text(trace)
    assert p1.split()[:8] == p2.split()[:8] and p1 != p2 and len(o1.split()) == len(trace[0].output_ids)
    with pytest.raises(ValueError, match="token_id"):
        token_word(-1)
