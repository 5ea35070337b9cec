"""Exercise specs: one description of an exercise, used by its notebook check cell AND by the grader.

An ``ExerciseSpec`` says which function the exercise cell defines, which cases to run, how to call
the function on one case (``drive``: plain data in, plain data out) and what the instructor's
``reference`` answer is. The check cell (``check_exercise``) and the grader (``grade.py``) run the
very same cases and the very same comparison; they differ only in *where* the student's function
runs:

* the check cell calls it in the student's own kernel: friendly, local, and forgeable (that is fine:
  it only informs the student);
* the grader calls it in an untrusted executor process (``runner.py``), receives only the plain data
  ``drive`` returned, and computes the expected answer, the comparison and the points in its own
  clean process. Nothing the student's code does can reach those.

An exercise whose answer is a test (04.2) names an ``oracle``: the implementations the test is run
on are evaluated by it, outside the student's process, and the cases are judged from runs
(``runs.py``).

Scores are in rubric points (``rubric.RUBRIC``): the ``main`` cases share the main-path points, the
``boundary`` cases the boundary points, by their ``weight``. A case that raises
``NotImplementedError`` fails alone (partial credit); the exercise is "not done" only when every case
does. Every case has a time limit, in the check cell too.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from .rubric import RUBRIC
from .runs import ask_oracle, case_outcomes, implementation, plain_json, run_keys

PARTS = ("main", "boundary")


@dataclass(frozen=True)
class GradedCase:
    """One case: ``args`` is plain data (lists, ints, strings) that ``drive`` turns into a call."""

    name: str
    args: Any
    part: str = "main"  # "main": the seed's visible asserts; "boundary": hidden edge cases
    weight: float = 1.0  # relative weight inside its part
    hidden: bool | None = None  # default: boundary cases are hidden

    def __post_init__(self) -> None:
        if self.part not in PARTS:
            raise ValueError(f"part must be one of {PARTS}, got {self.part!r}")
        if not self.weight > 0:
            raise ValueError(f"weight must be positive, got {self.weight}")
        if self.hidden is None:
            object.__setattr__(self, "hidden", self.part == "boundary")


@dataclass(frozen=True)
class ExerciseSpec:
    """What an exercise is, for the check cell and the grader alike (see CONTRIBUTING.md)."""

    id: str  # "NN.k": NN is the notebook number
    title: str
    function: str  # the name the exercise cell defines (the grader looks it up)
    check: str  # the check_* function the notebook's check cell calls
    reference: Callable  # the instructor's answer: expected values come from it, in the grader's process
    drive: Callable[[Callable, Any], Any]  # (fn, args) -> plain JSON-able data describing what fn did
    cases: Callable[[int], list[GradedCase]]  # seed -> cases; seed 0 is the check cell's, the grader draws its own
    forbidden: tuple[str, ...] = ()  # names the check cell tells apart: handing in radixlab's own function
    strip: tuple[str, ...] = ()  # absent from the grader's executor: "pkg.module" or "pkg.module:Qual.name"
    answer_imports: tuple[str, ...] = ()  # radixlab modules an answer may import besides the drive's (stripped too)
    compare: Callable[[Any, Any, Any], str | None] | None = None  # (got, want, args) -> message, None if right
    time_limit: float = 10.0  # seconds per case
    optional: bool = False  # graded and reported, but counted in no total (an exercise for who finishes early)
    # An exercise whose answer is a test (04.2): (run, question) -> (reply, record). Each case's
    # args["runs"] names the implementations its verdict needs; a run is one ``drive(fn, None, ask)``
    # (in the grader: a fresh process per run, in an order nobody sees) whose every ``ask(question)``
    # this answers, where the student's code cannot reach it; ``record``s (plain data) stay here.
    oracle: Callable[[str, Any], tuple[Any, Any]] | None = None

    @property
    def lesson(self) -> str:
        return self.id.split(".")[0]

    def copy_roots(self) -> tuple[str, ...]:
        """The modules the executor's copy of radixlab is built from (with everything they import)."""
        return (self.drive.__module__,) + self.answer_imports

    def all_stripped(self) -> tuple[str, ...]:
        """``strip`` plus the spec's own reference stub and the spec objects of the drive's module (they
        hold the reference): what the executor's copy of radixlab lacks."""
        ref = f"{self.reference.__module__}:{self.reference.__qualname__}"
        own = tuple(f"{self.drive.__module__}:{name}" for name in ("SPEC", "SPECS"))
        return self.strip + ((ref,) if ref.startswith("radixlab.") and "<" not in ref else ()) + own


# -- running one case: plain-data outcomes ----------------------------------------------------------


class CaseTimeout(BaseException):
    """Raised inside a case that ran past its time limit (BaseException: a bare except won't eat it)."""


def run_case(spec: ExerciseSpec, fn: Callable, args: Any, time_limit: float | None = None) -> dict:
    """Call ``spec.drive(fn, args)``; the outcome as plain data (what the executor sends back).

    ``{"answer": data}``, ``{"not_done": True}``, ``{"raised": "Type: message", "line": n}`` or
    ``{"timeout": seconds}``. In the main thread of a Unix process the case is interrupted after
    ``time_limit`` seconds (the check cell never hangs); elsewhere the caller enforces it. For an
    oracle spec, the case's runs happen here, one after the other (``run_in_place``).
    """
    limit = spec.time_limit if time_limit is None else time_limit
    if spec.oracle is not None:
        case = GradedCase("", args)
        return case_outcomes([case], run_in_place(spec, fn, run_keys([case]), limit))[0]
    return run_drive(spec.drive, fn, args, limit)


def run_drive(drive: Callable, fn: Callable, args: Any, limit: float, ask: Callable | None = None) -> dict:
    """``run_case`` without the spec: what the executor calls (it never holds a spec or a reference).
    With ``ask`` (an oracle spec's run), ``drive(fn, args, ask)``."""
    use_alarm = limit and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    old = None
    if use_alarm:
        def on_alarm(signum: int, frame: Any) -> None:
            raise CaseTimeout()
        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        try:
            return {"answer": drive(fn, args) if ask is None else drive(fn, args, ask)}
        finally:  # stop the timer first: an alarm after this point cannot hit the caller
            if use_alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
    except CaseTimeout:
        return {"timeout": limit}
    except NotImplementedError:
        return {"not_done": True}
    except (KeyboardInterrupt, GeneratorExit):
        raise
    except BaseException as exc:  # SystemExit too: a student's exit() is a failed case, not a dead check
        return {"raised": f"{type(exc).__name__}: {exc}"[:500], "line": _student_line(exc)}
    finally:
        if use_alarm:
            signal.signal(signal.SIGALRM, old)


def _student_line(exc: BaseException) -> int | None:
    """The line of the innermost frame outside radixlab and installed packages (the student's code)."""
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = os.path.abspath(frame.filename)
        if not path.startswith(package_dir) and "site-packages" not in path and "lib/python" not in path:
            return frame.lineno
    return None


# -- an exercise whose answer is a test (``runs.py``) ----------------------------------------------


def run_in_place(spec: ExerciseSpec, fn: Callable, keys: list[str], limit: float) -> dict[str, dict]:
    """Each run of an oracle spec in this process (the check cell): {run: outcome, with its "asks"}."""
    outcomes = {}
    for key in keys:
        records: list = []

        def ask(question: Any, key: str = key, records: list = records) -> Any:
            return plain_json(ask_oracle(lambda q: spec.oracle(implementation(key), q), records, plain_json(question)))
        outcomes[key] = run_drive(spec.drive, fn, None, limit, ask)
        outcomes[key]["asks"] = records
    return outcomes


def expected(spec: ExerciseSpec, args: Any) -> Any:
    """The expected answer, through JSON like the executor's answers (an oracle spec's compare needs none)."""
    return None if spec.oracle is not None else json.loads(json.dumps(spec.drive(spec.reference, args), default=repr))


def judge(spec: ExerciseSpec, case: GradedCase, outcome: dict, want: Any) -> tuple[bool, str]:
    """(passed, message) for one case: the student's outcome against the expected answer."""
    if "not_done" in outcome:
        return False, "not implemented: this case still reaches `raise NotImplementedError()`"
    if "timeout" in outcome:
        return False, f"timed out after {outcome['timeout']:g} s (an endless loop?)"
    if "raised" in outcome:
        line = outcome.get("line")
        return False, f"raised {outcome['raised']}" + (f" (line {line} of your code)" if line else "")
    if "answer" not in outcome:
        return False, f"no answer came back ({outcome.get('error', 'the executor stopped')})"
    got = outcome["answer"]
    try:
        message = (spec.compare or default_compare)(got, want, case.args)
    except Exception:  # an answer of an unexpected shape (the executor's data is untrusted)
        message = None if got == want else f"an answer of an unexpected shape came back: {repr(got)[:200]}"
    return (message is None), (message or "")


def default_compare(got: Any, want: Any, args: Any) -> str | None:
    return None if got == want else f"expected {want!r}, got {got!r}"


# -- scoring: one scale for the check cell and the grader -------------------------------------------


def case_points(cases: list[GradedCase], rubric: dict | None = None) -> list[float]:
    """Each case's share of the rubric's automatic points (main and boundary)."""
    rubric = rubric or RUBRIC
    parts = {p: [c for c in cases if c.part == p] for p in PARTS}
    budget = {"main": rubric["main"], "boundary": rubric["boundary"]}
    if not parts["boundary"]:
        budget["main"] += budget["boundary"]
    if not parts["main"]:
        budget["boundary"] += budget["main"]
    totals = {p: sum(c.weight for c in cs) for p, cs in parts.items()}
    return [budget[c.part] * c.weight / totals[c.part] for c in cases]


@dataclass
class CaseOutcome:
    name: str
    passed: bool
    points: float
    earned: float
    hidden: bool
    message: str = ""
    part: str = "main"
    outcome: str = ""  # "answer", "not_done", "raised", "timeout", "missing"
    seconds: float = 0.0


@dataclass
class CheckResult:
    """Verdict of one exercise check; ``repr`` is the friendly text shown under the check cell."""

    exercise: str
    title: str
    outcomes: list[CaseOutcome] = field(default_factory=list)
    optional: bool = False  # counted in no total (and no mapping point is marked)

    @property
    def not_done(self) -> bool:
        return bool(self.outcomes) and all(o.outcome == "not_done" for o in self.outcomes)

    @property
    def passed(self) -> bool:
        return bool(self.outcomes) and all(o.passed for o in self.outcomes)

    @property
    def score(self) -> float:
        return round(sum(o.earned for o in self.outcomes), 2)

    @property
    def max_score(self) -> float:
        return round(sum(o.points for o in self.outcomes), 2)

    def part_score(self, part: str) -> float:
        return round(sum(o.earned for o in self.outcomes if o.part == part), 2)

    def to_dict(self) -> dict:
        return {"exercise": self.exercise, "title": self.title, "passed": self.passed,
                "not_done": self.not_done, "score": self.score, "max_score": self.max_score,
                "cases": [dict(o.__dict__) for o in self.outcomes]}

    def __repr__(self) -> str:
        head = f"Exercise {self.exercise} ({self.title})"
        manual = ("; optional: counted in no total" if self.optional
                  else f" for the code; the written follow-up below is worth {RUBRIC['mapping']:g} more")
        if self.not_done:
            return (f"⏳ {head}: not done yet.\n"
                    f"   Replace `raise NotImplementedError()` under '# YOUR CODE HERE' with your code,\n"
                    f"   run that cell, then run this check again.")
        if self.passed:
            n_hidden = sum(o.hidden for o in self.outcomes)
            return (f"✅ {head}: passed.\n"
                    f"   All {len(self.outcomes)} checks passed ({n_hidden} of them hidden edge cases). "
                    f"Score {self.score:g}/{self.max_score:g}{manual}.")
        lines = [f"❌ {head}: not passed yet.",
                 f"   {sum(not o.passed for o in self.outcomes)} of {len(self.outcomes)} checks failed. "
                 f"Score {self.score:g}/{self.max_score:g}{manual}."]
        for o in self.outcomes:
            if not o.passed:
                label = "hidden case" if o.hidden else "case"
                message = o.message.replace("\n", "\n      ")
                lines.append(f"   ✗ {label} '{o.name}': {message}")
        return "\n".join(lines)

    __str__ = __repr__


def outcomes_for(spec: ExerciseSpec, cases: list[GradedCase], results: list[dict], wants: list[Any],
                 rubric: dict | None = None) -> CheckResult:
    """Judge every case; ``results[i]`` is the plain outcome of case i (from the kernel or the executor)."""
    result = CheckResult(spec.id, spec.title, optional=spec.optional)
    for case, pts, outcome, want in zip(cases, case_points(cases, rubric), results, wants):
        passed, message = judge(spec, case, outcome, want)
        kind = next((k for k in ("not_done", "timeout", "raised", "answer") if k in outcome), "missing")
        result.outcomes.append(CaseOutcome(case.name, passed, round(pts, 4), round(pts, 4) if passed else 0.0,
                                           bool(case.hidden), message, case.part, kind,
                                           round(outcome.get("seconds", 0.0), 3)))
    return result


RESULTS: list[CheckResult] = []
"""Verdicts shown in this kernel (for the student's own curiosity; the grader never reads them)."""


def check_exercise(spec: ExerciseSpec, fn: Any, *, seed: int = 0, record: bool = True,
                   time_limit: float | None = None) -> CheckResult | float:
    """The check cell: run ``spec``'s cases on ``fn`` here, compare with the reference, print a verdict."""
    if not callable(fn):
        raise TypeError(f"{spec.function} must be a function, got {type(fn).__name__}")
    own = _imported_reference(spec, fn)
    cases = spec.cases(seed)
    limit = spec.time_limit if time_limit is None else time_limit
    runs = run_in_place(spec, fn, run_keys(cases), limit) if spec.oracle is not None and not own else {}
    ran = case_outcomes(cases, runs) if runs else []
    results, wants = [], []
    for k, case in enumerate(cases):
        t0 = time.perf_counter()
        if own:
            outcome = {"raised": f"AssertionError: {spec.function} is radixlab's own {own}: write your own"}
        else:
            # the grader's executor receives the case through JSON (separate objects, lists for
            # tuples): so does the check cell, or `is` and tuple tests would pass here only
            outcome = ran[k] if ran else run_case(spec, fn, plain_json(case.args), time_limit)
        outcome["seconds"] = outcome.get("seconds", 0.0) + time.perf_counter() - t0
        if "answer" in outcome:  # compare as the grader does: both sides as JSON data
            outcome["answer"] = json.loads(json.dumps(outcome["answer"], default=repr))
        results.append(outcome)
        wants.append(expected(spec, case.args))
    result = outcomes_for(spec, cases, results, wants)
    if record:
        RESULTS.append(result)
    if os.environ.get("NBGRADER_EXECUTION"):  # nbgrader's autograde or validate is running this cell
        return nbgrader_score(result)
    return result


def nbgrader_score(result: CheckResult) -> float:
    """Under nbgrader: print the verdict, return the score (nbgrader's partial credit for a test cell)."""
    print(result)
    return result.score


def _imported_reference(spec: ExerciseSpec, fn: Any) -> str:
    """The reference's name when ``fn`` *is* radixlab's answer (handed in instead of written), else ''."""
    target = getattr(fn, "__func__", fn)
    where = f"{getattr(target, '__module__', '')}:{getattr(target, '__qualname__', '')}"
    library = [s for s in spec.strip if not s.startswith("radixlab.course.")]  # the course's wrong answers stay testable
    if where in library or any(":" not in s and where.startswith(s + ".") or where.startswith(s + ":")
                               for s in library):
        return where.replace(":", ".")
    from .sandbox import outside_copy

    outside = outside_copy(spec.copy_roots(), spec.all_stripped(), target)
    if outside:
        return outside
    if target is spec.reference or getattr(target, "__name__", "") in spec.forbidden and \
            str(getattr(target, "__module__", "")).startswith("radixlab"):
        return f"{target.__module__}.{getattr(target, '__qualname__', target)}"
    return ""

