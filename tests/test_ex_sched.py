"""Exercise 09.1 (the LPM order): the solution passes; a blank and plausible wrong answers fail."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from radixlab.course.edition import strip_markers
from radixlab.course.answers_sched import reference_lpm_order
from radixlab.course.ex_sched import SEED_DEPRIORITIZED, SEED_ORDER, SEED_QUEUE, SPEC, check_lpm_order
from radixlab.engine.schedule_policy import sort_by_longest_prefix

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "09_scheduling_and_serving.ipynb"


def notebook_solution():
    """The instructor's ``lpm_order`` from notebook 09, markers stripped."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    src = next(c.source for c in nb.cells if c.cell_type == "code" and "def lpm_order" in c.source)
    scope: dict = {}
    exec(strip_markers(src), scope)
    return scope["lpm_order"]


def blank(waiting, deprioritized):
    raise NotImplementedError()


def shortest_first(waiting, deprioritized):
    return [r for r, _ in sorted(waiting, key=lambda w: (w[0] in deprioritized, w[1]))]


def ignores_deprioritized(waiting, deprioritized):
    return [r for r, _ in sorted(waiting, key=lambda w: -w[1])]


def ties_by_name(waiting, deprioritized):
    return [r for r, _ in sorted(waiting, key=lambda w: (w[0] in deprioritized, -w[1], w[0]))]


def tail_by_prefix(waiting, deprioritized):  # the natural tuple key: the deprioritized tail sorted too
    return [r for r, _ in sorted(waiting, key=lambda w: (w[0] in deprioritized, -w[1]))]


def sorts_in_place(waiting, deprioritized):
    waiting.sort(key=lambda w: float("inf") if w[0] in deprioritized else -w[1])
    return [r for r, _ in waiting]


def fcfs(waiting, deprioritized):
    return [r for r, _ in waiting]


def test_seed_queue_answer():
    assert reference_lpm_order(SEED_QUEUE, SEED_DEPRIORITIZED) == SEED_ORDER


@pytest.mark.skipif(not NOTEBOOK.exists(), reason="notebook 09 not written yet")
def test_notebook_solution_passes_with_full_marks():
    result = check_lpm_order(notebook_solution())
    assert result.passed and result.score == result.max_score == 3
    assert repr(result).startswith("✅ Exercise 09.1 (the LPM order)")


def test_reference_passes():
    assert check_lpm_order(lambda w, d: reference_lpm_order(list(w), set(d))).passed


def test_blank_is_not_done_yet():
    result = check_lpm_order(blank)
    assert result.not_done and result.score == 0 and repr(result).startswith("⏳ Exercise 09.1")


def test_handing_in_radixlab_own_answer_fails():
    for own in (reference_lpm_order, sort_by_longest_prefix):
        result = check_lpm_order(own)
        assert not result.passed and result.score == 0


@pytest.mark.parametrize("wrong", [shortest_first, ignores_deprioritized, ties_by_name, tail_by_prefix,
                                   sorts_in_place, fcfs])
def test_plausible_wrong_answers_fail(wrong):
    result = check_lpm_order(wrong)
    assert not result.passed and not result.not_done and result.score < result.max_score
    assert repr(result).startswith("❌ Exercise 09.1")


def test_fcfs_fails_the_hit_rate_case_and_says_why():
    text = repr(check_lpm_order(fcfs))
    assert "hit rate" in text and "LPM reaches" in text


def test_check_rejects_a_non_function():
    with pytest.raises(TypeError, match="lpm_order"):
        check_lpm_order("lpm")


def test_grader_seeds_draw_other_hidden_cases_that_the_solution_still_passes():
    for seed in (1, 2):
        cases = SPEC.cases(seed)
        assert cases[-1].args != SPEC.cases(0)[-1].args
        for case in cases:
            assert SPEC.drive(reference_lpm_order, case.args) == SPEC.drive(SPEC.reference, case.args)


def visible_table(waiting, deprioritized):
    """The check cell's two visible answers, looked up; anything else in arrival order."""
    if [tuple(w) for w in waiting] == [("q1", 0), ("q2", 96), ("q3", 40), ("q4", 96), ("q5", 0)]:
        return ["q2", "q4", "q3", "q1", "q5"]
    if [tuple(w) for w in waiting] == [("b", 5), ("a", 5), ("c", 9)]:
        return ["c", "b", "a"]
    return [w[0] for w in waiting]


def test_the_graders_seeds_redraw_the_visible_queues():
    """A table of the visible answers scored 1.4/3 in the grader; on a grader seed it passes no main case,
    while the solution and ties-by-name behave as on the check cell's queues."""
    from radixlab.course.spec import check_exercise
    for seed in (1, 7, 12345):
        r = check_exercise(SPEC, visible_table, seed=seed, record=False)
        assert r.part_score("main") == 0, repr(r)
        assert check_exercise(SPEC, notebook_solution(), seed=seed, record=False).passed
        r = check_exercise(SPEC, ties_by_name, seed=seed, record=False)
        assert not r.outcomes[1].passed, repr(r)


def test_same_hit_rate_other_order_says_so():
    """Ties broken by name reach LPM's hit rate in another order: the message said '60% ... LPM reaches 60%.
    Longest cached prefix first?'; it must name the tie-break."""
    r = check_lpm_order(ties_by_name, record=False)
    sim = next(o for o in r.outcomes if "hit rate" in o.name)
    assert not sim.passed and "arrival order" in sim.message and "Longest cached prefix first" not in sim.message
