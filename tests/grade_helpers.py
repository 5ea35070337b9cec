"""Run one answer through the grader's executor, fast (no notebook): extract, stripped copy, sandbox."""

from __future__ import annotations

from pathlib import Path

import nbformat

from radixlab.course.edition import strip_markers
from radixlab.course.exercises import all_specs
from radixlab.course.extract import extract
from radixlab.course.runner import run_exercise
from radixlab.course.runs import plan
from radixlab.course.spec import CheckResult, check_exercise, expected, outcomes_for


def grade_cells(exercise: str, cells: list[str], *, sandbox: bool | None = None, seed: int = 7,
                check: str | None = None) -> tuple[CheckResult | None, object]:
    """(the grader's verdict, the run) for an answer made of ``cells`` (None: it was not defined)."""
    spec = all_specs()[exercise]
    ex = extract(list(enumerate(cells)), spec.function, check=check or spec.check)
    assert not ex.problem, ex.problem
    cases = spec.cases(seed)
    wants = [expected(spec, c.args) for c in cases]
    jobs, oracles, outcomes = plan(spec, cases)
    run = run_exercise(spec.id, spec.function, ex.cells, [(s.cell, s.index, s.keep) for s in ex.statements],
                       jobs, spec.time_limit, 60, 300, sandbox=sandbox, oracles=oracles)
    if not run.defined:
        return None, run
    return outcomes_for(spec, cases, outcomes(run.outcomes), wants), run


def in_kernel(exercise: str, cells: list[str]) -> CheckResult:
    """What the check cell shows: the cells run in one namespace up to the check, then check_exercise."""
    spec = all_specs()[exercise]
    ns: dict = {"__name__": "__main__", spec.check: lambda fn: None}
    for source in cells:
        if spec.check + "(" in source:
            break
        exec(compile(source, "<cell>", "exec"), ns)
    return check_exercise(spec, ns[spec.function], record=False, seed=7)


def assert_full_marks_and_parity(exercise: str, cells: list[str]) -> None:
    """An honest answer: 3/3 from the grader, and the check cell's verdict case by case the same (issue 19, 2 and 4)."""
    result, run = grade_cells(exercise, cells)
    assert result is not None, (run.errors, run.stopped)
    assert result.passed and result.score == 3, repr(result)
    kernel = in_kernel(exercise, cells)
    assert kernel.passed and [o.passed for o in kernel.outcomes] == [o.passed for o in result.outcomes]


def assert_grader_score(exercise: str, source: str, score: int | None) -> None:
    """One answer cell in the grader: ``3`` full marks, ``0`` nothing (a blank or a forgery), ``None`` a
    wrong answer that may pass some cases (partial credit) but never all."""
    result, run = grade_cells(exercise, [source])
    if score == 3:
        assert result is not None and result.passed and result.score == 3, (repr(result), run.errors)
    elif score == 0:
        assert result is None or result.score == 0, repr(result)
    else:
        assert result is not None and not result.passed and result.score < 3, repr(result)


def notebook_solution(notebook: Path, name: str, **scope):
    """The instructor's answer ``name`` from ``notebook``'s answer cell, markers stripped, run in ``scope``."""
    nb = nbformat.read(notebook, as_version=4)
    src = next(c.source for c in nb.cells if c.cell_type == "code" and f"def {name}" in c.source)
    exec(strip_markers(src), scope)
    return scope[name]
