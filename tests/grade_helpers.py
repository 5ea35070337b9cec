"""Run one answer through the grader's executor, fast (no notebook): extract, stripped copy, sandbox."""

from __future__ import annotations

from radixlab.course.exercises import all_specs
from radixlab.course.extract import extract
from radixlab.course.runner import run_exercise
from radixlab.course.runs import plan
from radixlab.course.spec import CheckResult, expected, outcomes_for


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
