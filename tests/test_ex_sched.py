"""Exercise 09.1 (the LPM order): the solution passes; a blank and plausible wrong answers fail."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from radixlab.course.edition import strip_markers
from radixlab.course.answers_sched import reference_lpm_order
from radixlab.course.ex_sched import SEED_DEPRIORITIZED, SEED_ORDER, SEED_QUEUE, SPEC, check_lpm_order
from radixlab.engine.policies import sort_by_longest_prefix

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
