"""Run one answer through the grader's executor, fast (no notebook): extract, stripped copy, sandbox."""

from __future__ import annotations

import json

from radixlab.course.exercises import all_specs
from radixlab.course.extract import extract
from radixlab.course.runner import run_exercise
from radixlab.course.spec import CheckResult, outcomes_for


def grade_cells(exercise: str, cells: list[str], *, sandbox: bool | None = None, seed: int = 7,
                check: str | None = None) -> tuple[CheckResult | None, object]:
    """(the grader's verdict, the run) for an answer made of ``cells`` (None: it was not defined)."""
    spec = all_specs()[exercise]
    ex = extract(list(enumerate(cells)), spec.function, check=check or spec.check)
    assert not ex.problem, ex.problem
    cases = spec.cases(seed)
    wants = [json.loads(json.dumps(spec.drive(spec.reference, c.args), default=repr)) for c in cases]
    run = run_exercise(spec.id, spec.function, ex.cells, [(s.cell, s.index, s.keep) for s in ex.statements],
                       [c.args for c in cases], spec.time_limit, 60, 300, sandbox=sandbox)
    if not run.defined:
        return None, run
    return outcomes_for(spec, cases, run.outcomes, wants), run
