"""The lesson a submission is graded as: its exercises and written questions, read from the
instructor edition (``load_lesson``), and which lesson a submission belongs to (``find_lesson``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .edition import is_solution_cell
from .exercises import by_check, for_lesson
from .extract import course_statements
from .rubric import RUBRIC
from .spec import ExerciseSpec

CHECK_CALL = re.compile(r"(?<!def )\b(check_(?!prediction\b)\w+)\s*\(")
DEFAULT_RUBRIC = dict(RUBRIC)


class UsageError(Exception):
    """The grader was called wrongly (bad path, unknown lesson): exit 2 with this message."""


# -- 1. the lesson: what the instructor edition expects ---------------------------------------------


@dataclass
class Exercise:
    id: str
    title: str
    check: str  # the check function the notebook's check cell calls, e.g. "check_longest_cached_prefix"
    spec: ExerciseSpec | None = None  # None: no grading spec yet, marked by hand


@dataclass
class Question:
    label: str
    text: str  # the whole markdown cell before the reference answer (to find it in a submission)
    prompt: str  # the question itself: the paragraphs from its label on
    reference: str
    points: float | None = None  # the solution cell's metadata {"radixlab": {"points": N}} overrides the rubric


def _question(cell_source: str, k: int) -> tuple[str, str]:
    """(label, prompt): "Q2" from "**Q2 (lesson 4).** Why ...", else a bold lead like "Follow-up", else "Qk"."""
    paras = [p.strip() for p in re.split(r"\n\s*\n", cell_source) if p.strip()] or [""]
    at = next((i for i in range(len(paras) - 1, -1, -1) if re.search(r"\bQ\d+\b", paras[i])), len(paras) - 1)
    prompt = "\n\n".join(paras[at:])
    label = re.search(r"\bQ\d+\b", prompt)
    lead = re.match(r"\*\*([^*]{1,40}?)[.:：]?\*\*", prompt)
    return (label.group(0) if label else lead.group(1).strip() if lead else f"Q{k}"), prompt


@dataclass
class Lesson:
    name: str
    path: Path
    title: str
    exercises: list[Exercise]
    questions: list[Question]
    rubric: dict
    cells: set[str]  # every instructor cell source (to tell course text from a student's answer)
    problem: str = ""  # why this lesson cannot be graded (raised only when a submission needs it)
    statements: set[str] = field(default_factory=set)  # every instructor code statement (course text)


def _first_heading(nb: nbformat.NotebookNode) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.strip():
            return cell.source.strip().splitlines()[0].lstrip("# ").strip()
    return ""


def load_lesson(path: Path) -> Lesson:
    """The exercises (the registry's specs for this notebook) and the written questions of one notebook.

    A notebook's exercises are the specs whose id starts with its ``NN`` plus the specs whose check
    function one of its cells calls; a check call without a spec becomes a row marked by hand.
    """
    nb = nbformat.read(path, as_version=4)
    questions: list[Question] = []
    calls: list[str] = []
    for i, cell in enumerate(nb.cells):
        if is_solution_cell(cell):
            prev = nb.cells[i - 1].source.strip() if i > 0 else ""
            label, prompt = _question(prev, len(questions) + 1)
            points = cell.get("metadata", {}).get("radixlab", {}).get("points")
            questions.append(Question(label, prev, prompt, cell.source.strip(), points))
        if cell.cell_type == "code":
            calls += [c for c in CHECK_CALL.findall(cell.source) if c not in calls]
    number = re.match(r"(\d\d)_", path.name)
    specs = {s.id: s for s in (for_lesson(number.group(1)) if number else [])}
    exercises: list[Exercise] = []
    for name in calls:
        spec = by_check(name)
        if spec is not None:
            specs.pop(spec.id, None)
        # A check with no ExerciseSpec (an instructor's new notebook) is listed for marking by hand.
        exercises.append(Exercise(spec.id if spec else "?", spec.title if spec else name, name, spec))
    exercises += [Exercise(s.id, s.title, s.check, s) for s in specs.values()]
    exercises.sort(key=lambda e: e.id)
    rubric = {**DEFAULT_RUBRIC, **nb.metadata.get("radixlab", {}).get("rubric", {})}
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    return Lesson(path.stem, path, _first_heading(nb), exercises, questions, rubric,
                  {c.source.strip() for c in nb.cells if not is_solution_cell(c)}, "",
                  course_statements(code))


def find_lesson(submission: Path, lessons: list[Lesson], name: str | None = None,
                nb: nbformat.NotebookNode | None = None) -> Lesson:
    """Same file name, else same title, else same ``NN_`` number; ``name`` (--lesson) overrides."""
    if name:
        hits = [l for l in lessons if l.name == Path(name).stem or l.name.startswith(f"{name}_")]
        if not hits:
            raise UsageError(f"--lesson {name!r} matches none of: {', '.join(l.name for l in lessons)}")
        return hits[0]
    for lesson in lessons:
        if lesson.name == submission.stem:
            return lesson
    title = _first_heading(nb) if nb is not None else ""
    for lesson in lessons:
        if title and lesson.title == title:
            return lesson
    number = re.search(r"(?<!\d)(\d\d)_", submission.name)
    for lesson in lessons:
        if number and lesson.name.startswith(number.group(1) + "_"):
            return lesson
    raise UsageError(f"cannot tell which lesson {submission} is (no notebook of that name, title or NN_ "
                     "number); pass --lesson NN")


def wrong_lesson(sub: nbformat.NotebookNode, lesson: Lesson, lessons: list[Lesson]) -> str:
    """A warning when the submission's content is another lesson's (e.g. lesson 03 saved as 04)."""
    title = _first_heading(sub)
    if not title or title == lesson.title:
        return ""
    sources = {c.source.strip() for c in sub.cells}
    overlap = lambda l: len(sources & l.cells) / max(1, len(l.cells))  # noqa: E731
    best = max(lessons, key=overlap)
    if best is not lesson and overlap(best) > max(0.3, overlap(lesson)):
        return (f"this is lesson {best.name} (its title is {title!r} and {overlap(best):.0%} of its cells are "
                f"that lesson's), not {lesson.name}: was the wrong notebook handed in?")
    return ""
