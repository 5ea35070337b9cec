"""Small assertion helpers for checks, and the older ``Case``/``run_check`` framework.

Graded exercises are ``ExerciseSpec``s (``radixlab.course.spec``; see CONTRIBUTING.md): the check
cell and the grader run the same cases, and the grader computes every verdict in its own process.
``run_check`` here still prints a friendly verdict for an ungraded, local check, but the grader never
reads ``RESULTS`` or anything else from the student's kernel: a check written only with ``run_check``
is not graded automatically (the grader lists it for marking by hand).
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

RESULTS: list["CheckResult"] = []
"""Every verdict produced in this process, in order (for the student; the grader never reads it)."""


@dataclass
class Case:
    """One test case: ``fn()`` raises AssertionError (or anything) when the answer is wrong."""

    name: str
    fn: Callable[[], Any]
    points: float = 1.0
    hidden: bool = False  # hidden cases are not shown in the notebook, only counted
    part: str = ""  # rubric part: "main", "boundary" or "mapping"; default: main if visible, else boundary

    def __post_init__(self) -> None:
        self.part = self.part or ("boundary" if self.hidden else "main")
        if self.part not in RUBRIC_PARTS:
            raise ValueError(f"part must be one of {RUBRIC_PARTS}, got {self.part!r}")


RUBRIC_PARTS = ("main", "boundary", "mapping")


@dataclass
class CaseOutcome:
    name: str
    passed: bool
    points: float
    earned: float
    hidden: bool
    message: str = ""
    part: str = "main"


@dataclass
class CheckResult:
    """Verdict of one exercise check; ``repr`` is the friendly text shown under the check cell."""

    exercise: str
    title: str
    outcomes: list[CaseOutcome] = field(default_factory=list)
    not_done: bool = False

    @property
    def passed(self) -> bool:
        return not self.not_done and all(o.passed for o in self.outcomes)

    @property
    def score(self) -> float:
        return sum(o.earned for o in self.outcomes)

    @property
    def max_score(self) -> float:
        return sum(o.points for o in self.outcomes)

    def to_dict(self) -> dict:
        return {"exercise": self.exercise, "title": self.title, "passed": self.passed,
                "not_done": self.not_done, "score": self.score, "max_score": self.max_score,
                "cases": [o.__dict__ for o in self.outcomes]}

    def __repr__(self) -> str:
        head = f"Exercise {self.exercise} ({self.title})"
        if self.not_done:
            return (f"⏳ {head}: not done yet.\n"
                    f"   Replace `raise NotImplementedError()` under '# YOUR CODE HERE' with your code,\n"
                    f"   run that cell, then run this check again.")
        if self.passed:
            n_hidden = sum(o.hidden for o in self.outcomes)
            return (f"✅ {head}: passed.\n"
                    f"   All {len(self.outcomes)} checks passed ({n_hidden} of them hidden edge cases). "
                    f"Score {self.score:g}/{self.max_score:g}.")
        lines = [f"❌ {head}: not passed yet.",
                 f"   {sum(not o.passed for o in self.outcomes)} of {len(self.outcomes)} checks failed. "
                 f"Score {self.score:g}/{self.max_score:g}."]
        for o in self.outcomes:
            if not o.passed:
                label = "hidden case" if o.hidden else "case"
                message = o.message.replace("\n", "\n      ")
                lines.append(f"   ✗ {label} '{o.name}': {message}")
        return "\n".join(lines)

    __str__ = __repr__


def run_check(exercise: str, title: str, cases: list[Case], record: bool = True) -> CheckResult:
    """Run ``cases`` and build the verdict. A NotImplementedError anywhere means "not done yet"."""
    result = CheckResult(exercise, title)
    for case in cases:
        def outcome(passed: bool, message: str = "") -> CaseOutcome:
            return CaseOutcome(case.name, passed, case.points, case.points if passed else 0.0, case.hidden,
                               message, case.part)
        try:
            case.fn()
        except NotImplementedError:
            result.not_done = True
            result.outcomes.append(outcome(False, "not implemented"))
        except AssertionError as exc:
            result.outcomes.append(outcome(False, str(exc) or "assertion failed"))
        except Exception as exc:  # a crash in student code is a failed case, not a crash of the check
            result.outcomes.append(outcome(False, f"raised {type(exc).__name__}: {exc}{_student_line(exc)}"))
        else:
            result.outcomes.append(outcome(True))
    if record:
        RESULTS.append(result)
    return result


def _student_line(exc: BaseException) -> str:
    """Where the student's code raised: the innermost frame outside radixlab and installed packages."""
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = os.path.abspath(frame.filename)
        if not path.startswith(package_dir) and "site-packages" not in path and "lib/python" not in path:
            return f" (line {frame.lineno} of your code)"
    return ""


def own_code(fn: Callable, what: str, *references: Callable) -> Callable:
    """``fn``, or a stand-in that fails every case when ``fn`` *is* one of radixlab's ``references``
    (the answer imported instead of written)."""
    if any(fn is ref or getattr(fn, "__func__", None) is ref for ref in references):
        name = f"{fn.__module__}.{getattr(fn, '__qualname__', fn)}"

        def imported(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"{what} is radixlab's own {name}: write your own")
        return imported
    return fn


def expect_equal(got: Any, want: Any, what: str) -> None:
    """Assert with a message a student can act on."""
    if got != want:
        raise AssertionError(f"{what}: expected {want!r}, got {got!r}")


def expect_raises(exc_type: type[BaseException], fn: Callable[[], Any], what: str) -> None:
    try:
        fn()
    except exc_type:
        return
    except NotImplementedError:
        raise
    except Exception as exc:
        raise AssertionError(f"{what}: expected {exc_type.__name__}, got {type(exc).__name__}: {exc}") from None
    raise AssertionError(f"{what}: expected {exc_type.__name__}, but nothing was raised")
