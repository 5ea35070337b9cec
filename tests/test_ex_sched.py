"""Exercise 09.1 (the LPM order, in-batch check included): the solution passes; a blank and plausible
wrong answers fail, each with a message that names its mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from radixlab.course.answers_sched import reference_lpm_order
from radixlab.course.ex_sched import SEED_DEPRIORITIZED, SEED_ORDER, SEED_QUEUE, SEED_TREE, SPEC, _tree, \
    check_lpm_order
from radixlab.engine.schedule_policy import SimRequest, compute_prefix_matches, sort_by_longest_prefix
from radixlab.mem_cache import RadixCache, RadixKey
from grade_helpers import notebook_solution as _notebook_solution

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "09_scheduling_and_serving.ipynb"


def notebook_solution():
    return _notebook_solution(NOTEBOOK, "lpm_order")


def make(check=lambda cached: cached <= 32, held=lambda shared: shared >= 32, insert_first=False, into=None,
         key=lambda cached, rid, dep: float("inf") if rid in dep else -cached, in_place=False):
    """An ``lpm_order`` with one piece changed (the defaults give the reference)."""
    def lpm_order(waiting, tree):
        scratch = tree if into == "tree" else RadixCache()
        cached, dep = {}, set()
        for rid, ids in waiting:
            k = RadixKey(list(ids))
            cached[rid] = len(tree.match_prefix(k))
            if check(cached[rid]):
                if insert_first:
                    scratch.insert(k)
                if held(len(scratch.match_prefix(k))):
                    dep.add(rid)
                elif not insert_first:
                    scratch.insert(k)
        if in_place:
            waiting.sort(key=lambda w: key(cached[w[0]], w[0], dep))
            return [r for r, _ in waiting], dep
        return [r for r, _ in sorted(waiting, key=lambda w: key(cached[w[0]], w[0], dep))], dep
    return lpm_order


def blank(waiting, tree):
    raise NotImplementedError()


WRONG = {
    # the in-batch check
    "no in-batch check": (make(check=lambda c: False), "should be deprioritized"),
    "inserts before matching": (make(insert_first=True), "match the scratch tree first"),
    "checks every request, even long cached ones": (make(check=lambda c: True), "cached tokens goes through"),
    "cached < 32 instead of <= 32": (make(check=lambda c: c < 32), "exactly 32 tokens cached"),
    "shared > 32 instead of >= 32": (make(held=lambda s: s > 32), "exactly 32 tokens"),
    "the cache's tree as the scratch tree": (make(into="tree"), "scratch tree of its own"),
    # the sort
    "shortest cached prefix first": (make(key=lambda c, r, d: (r in d, c)), "longest cached prefix first"),
    "ties broken by name": (make(key=lambda c, r, d: (r in d, -c, r)), "arrival order"),
    "the deprioritized tail sorted by prefix": (make(key=lambda c, r, d: (r in d, -c)), "go last, in arrival order"),
    "sorts the caller's list in place": (make(in_place=True), "changed the caller's queue"),
    "arrival order (FCFS)": (make(key=lambda c, r, d: 0), "the order should be"),
}


def test_seed_queue_answer():
    assert reference_lpm_order(SEED_QUEUE, _tree(SEED_TREE)) == (SEED_ORDER, SEED_DEPRIORITIZED)


def test_reference_agrees_with_the_engine_on_random_queues():
    from radixlab.course.ex_sched import random_queues
    for prompts, queue in random_queues(80, seed=3):
        reqs = [SimRequest(i, tuple(ids)) for i, (_, ids) in enumerate(queue)]
        prefix_len, _, dep = compute_prefix_matches(reqs, _tree(prompts))
        want = [queue[r.rid][0] for r in sort_by_longest_prefix(reqs, prefix_len, dep)]
        assert reference_lpm_order(queue, _tree(prompts)) == (want, {queue[i][0] for i in dep})


@pytest.mark.skipif(not NOTEBOOK.exists(), reason="notebook 09 not written yet")
def test_notebook_solution_passes_with_full_marks():
    result = check_lpm_order(notebook_solution())
    assert result.passed and result.score == result.max_score == 3
    assert repr(result).startswith("✅ Exercise 09.1 (the LPM order)")


def test_reference_and_its_rebuild_pass():
    assert check_lpm_order(lambda w, t: reference_lpm_order(list(w), t), record=False).passed
    assert check_lpm_order(make(), record=False).passed


def test_blank_is_not_done_yet():
    result = check_lpm_order(blank)
    assert result.not_done and result.score == 0 and repr(result).startswith("⏳ Exercise 09.1")


def test_handing_in_radixlab_own_answer_fails():
    result = check_lpm_order(reference_lpm_order)
    assert not result.passed and result.score == 0


@pytest.mark.parametrize("name", sorted(WRONG))
def test_plausible_wrong_answers_fail_and_are_named(name):
    wrong, says = WRONG[name]
    result = check_lpm_order(wrong, record=False)
    assert not result.passed and not result.not_done and result.score < result.max_score
    text = repr(result)
    assert text.startswith("❌ Exercise 09.1") and says in text, text


def test_fcfs_fails_the_hit_rate_case_and_says_why():
    text = repr(check_lpm_order(WRONG["arrival order (FCFS)"][0], record=False))
    assert "hit rate" in text and "LPM reaches" in text


def test_check_rejects_a_non_function():
    with pytest.raises(TypeError, match="lpm_order"):
        check_lpm_order("lpm")


def test_grader_seeds_draw_other_cases_that_the_solution_still_passes():
    for seed in (1, 2):
        cases = SPEC.cases(seed)
        assert cases[-1].args != SPEC.cases(0)[-1].args and cases[0].args != SPEC.cases(0)[0].args
        for case in cases:
            assert SPEC.drive(reference_lpm_order, case.args) == SPEC.drive(SPEC.reference, case.args)


def visible_table(waiting, tree):
    """The check cell's visible answers, looked up; anything else in arrival order."""
    rids = [w[0] for w in waiting]
    if rids == [r for r, _ in SEED_QUEUE]:
        return SEED_ORDER, SEED_DEPRIORITIZED
    if rids == ["b", "a", "c"]:
        return ["c", "b", "a"], set()
    return rids, set()


def test_the_graders_seeds_redraw_the_visible_queues():
    from radixlab.course.spec import check_exercise
    for seed in (1, 7, 12345):
        r = check_exercise(SPEC, visible_table, seed=seed, record=False)
        assert r.part_score("main") == 0, repr(r)
        assert check_exercise(SPEC, notebook_solution(), seed=seed, record=False).passed
        r = check_exercise(SPEC, WRONG["ties broken by name"][0], seed=seed, record=False)
        assert not r.outcomes[1].passed, repr(r)
