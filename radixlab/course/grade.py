"""Grade student submissions: the grader computes every verdict itself; student code only answers.

    python -m radixlab grade SUBMISSION.ipynb [...] [--json FILE|-] [--timeout S] [--case-timeout S]
                             [--total-timeout S] [--lesson NN] [--notebooks DIR] [--seed N] [--no-sandbox]

For each submission the grader (1) finds its lesson, the instructor notebook of the same name (or
title, or ``NN_`` number), and the lesson's exercises (``radixlab.course.exercises``: one
``ExerciseSpec`` each) and written questions; (2) for each exercise, reads the submission *without
running it* and extracts the exercise function with the imports and helpers it uses, as its check
cell saw them (``extract.py``); (3) runs that function in a fresh process on inputs the grader
chose, with a time limit per case (``runner.py``), against a copy of radixlab from which the
exercise's reference is absent, inside bubblewrap where it works (``sandbox.py``), and receives
plain data back;
(4) computes the expected answers from its own clean radixlab, compares, and scores each case by the
course rubric (``rubric.py``), partial credit case by case; (5) lists each written answer for marking
by hand. Check-cell verdicts, printed lines and anything else in the student's kernel are never read.

Rubric (lesson 4 of the seeds, applied to every exercise and question of the course): code 4 points
= main path 2 (the seed's visible asserts) + boundary cases 1 (hidden edge cases, drawn afresh for
every grading run from ``--seed``) + mapping to source objects 1 (by hand); each written question 2
points (by hand); pass at 80 %. A notebook can override the numbers in its metadata:
``{"radixlab": {"rubric": {"main": 2, ...}}}``.

Every submission gets a report, with a reason on every row, even when it is missing, unreadable,
of another lesson, loops, raises, kills its process or sends malformed messages; with ``--json`` the
file is rewritten after each submission. Each report's header says whether student code ran in
bubblewrap; without it, the whole Python environment is checked for changes after each submission.
The exit code is 0 unless the grader itself was misused (exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .edition import ANSWER_PLACEHOLDER, is_solution_cell
from .exercises import all_specs, by_check, for_lesson
from . import sandbox as sandbox_mod
from .extract import course_statements, extract
from .rubric import RUBRIC
from .runner import run_exercise
from .spec import ExerciseSpec, outcomes_for

CHECK_CALL = re.compile(r"(?<!def )\b(check_\w+)\s*\(")
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


# -- 2. score (running a submission: runner.py) -----------------------------------------------------


def _code_cells(sub: nbformat.NotebookNode) -> list[tuple[int, str]]:
    return [(i, c.source) for i, c in enumerate(sub.cells) if c.cell_type == "code" and c.source.strip()]


def _row(exp: Exercise, rubric: dict) -> dict:
    return {"exercise": exp.id, "title": exp.title, "check": exp.check, "points": 0.0,
            "max_points": rubric["main"] + rubric["boundary"], "manual_points_max": rubric["mapping"],
            "main_path": 0.0, "boundary": 0.0, "status": "", "reason": "", "check_score": 0.0,
            "check_max_score": rubric["main"] + rubric["boundary"], "cases": [], "findings": [], "notes": []}


def grade_exercise(exp: Exercise, sub: nbformat.NotebookNode, lesson: Lesson, seed: int,
                   timeouts: dict, execution: dict) -> dict:
    """Grade one exercise of one submission: extract, review, run in the executor, judge here."""
    rubric = lesson.rubric
    row = _row(exp, rubric)
    spec = exp.spec
    if spec is None:
        row.update(status="manual", reason=f"{exp.check}() has no ExerciseSpec yet, and a verdict from the student's "
                   "kernel cannot be trusted: mark by hand (CONTRIBUTING.md, 'Exercises', says how to add one)")
        return row
    calls = [i for i, c in enumerate(sub.cells) if c.cell_type == "code" and exp.check in CHECK_CALL.findall(c.source)]
    if not calls:
        row["notes"].append(f"check cell missing (no cell calls {exp.check}()): graded anyway")
    ex = extract(_code_cells(sub), spec.function, lesson.statements, exp.check)
    execution["errors"] += [e for e in ex.syntax_errors if e not in execution["errors"]]
    if ex.problem:
        row.update(status="missing", reason=ex.problem)
        return row
    if ex.note and not ex.note.startswith("graded as the check cell"):
        row["notes"].append(ex.note)
    cases = spec.cases(seed)
    args = [c.args for c in cases]
    # The expected answers, from the grader's own radixlab, through JSON like the executor's answers;
    # computed before any student code runs, so nothing that code does can reach them.
    wants = [json.loads(json.dumps(spec.drive(spec.reference, a), default=repr)) for a in args]
    left = max(1.0, timeouts["total"] - execution["seconds"])
    run = run_exercise(spec.id, spec.function, ex.cells, [(s.cell, s.index, s.keep) for s in ex.statements], args,
                       timeouts["case"] or spec.time_limit, timeouts["define"], left,
                       drive=f"{spec.drive.__module__}:{spec.drive.__qualname__}", strip=spec.all_stripped(),
                       roots=spec.copy_roots(),
                       sandbox=timeouts.get("sandbox"))
    execution["seconds"] = round(execution["seconds"] + run.seconds, 2)
    execution["cells_run"] = max(execution["cells_run"], len(ex.cells))
    execution["errors"] += run.errors
    if run.stopped and not execution["stopped"]:
        execution["stopped"] = f"{spec.id}: {run.stopped}"
    if not run.defined:
        row.update(status="error", reason="the exercise function could not be defined: "
                   + ("; ".join(f"cell {e['cell']} raised {e['ename']}: {e['evalue']}" for e in run.errors) or run.stopped))
        return row
    result = outcomes_for(spec, cases, run.outcomes, wants, rubric)
    row["cases"] = [dict(o.__dict__) for o in result.outcomes]
    row["main_path"], row["boundary"] = result.part_score("main"), result.part_score("boundary")
    row["points"] = row["check_score"] = result.score
    row["check_max_score"] = result.max_score
    if result.not_done:
        row.update(status="not done", reason="not done yet: every case still raises NotImplementedError")
        return row
    failed = [o for o in result.outcomes if not o.passed]
    row["status"] = "passed" if not failed else "failed"
    row["reason"] = "; ".join(f"{'hidden ' if o.hidden else ''}'{o.name}': {o.message}" for o in failed)
    return row


def _answer(q: Question, lesson: Lesson, sub: nbformat.NotebookNode) -> tuple[str, str]:
    """The student's answer to ``q``: the markdown cells after the question that are not course text."""
    norm = lambda s: " ".join(s.split())  # noqa: E731
    at = next((i for i, c in enumerate(sub.cells) if norm(c.source) == norm(q.text)), None)
    if at is None and q.text:
        first = q.text.splitlines()[0]
        at = next((i for i, c in enumerate(sub.cells) if c.source.strip().startswith(first)), None)
    if at is None:
        return "missing", "(question cell missing)"
    parts = []
    for cell in sub.cells[at + 1:]:
        if cell.cell_type != "markdown" or cell.source.strip() in lesson.cells:
            break
        parts.append(cell.source.replace(ANSWER_PLACEHOLDER, "").strip())
    answer = "\n\n".join(p for p in parts if p and p.strip("*_ :") not in ("Your answer", ""))
    return ("answered", answer) if answer else ("blank", "(no answer)")


def grade_submission(path: Path, lesson: Lesson | None, cell_timeout: float = 60, total_timeout: float = 600,
                     *, case_timeout: float | None = None, seed: int = 0, lessons: list[Lesson] | None = None,
                     nb: nbformat.NotebookNode | None = None, problem: str = "", sandbox: bool | None = None) -> dict:
    """Grade one submission and build its report (a JSON-ready dict). Never raises for a bad submission.

    ``sandbox``: None runs student code under bubblewrap where it works, False never does."""
    boxed = sandbox is not False and sandbox_mod.sandboxed()
    report = {"submission": str(path), "lesson": lesson.name if lesson else "?", "title": lesson.title if lesson else "",
              "sandbox": "bubblewrap" if boxed else f"none ({'turned off' if sandbox is False else sandbox_mod.sandbox_works()})",
              "status": "graded", "rubric": lesson.rubric if lesson else dict(DEFAULT_RUBRIC), "grader_seed": seed,
              "warnings": [], "execution": {"seconds": 0.0, "cells_run": 0, "errors": [], "stopped": ""},
              "exercises": [], "questions": []}
    rubric = report["rubric"]
    sub = nb
    if sub is None and not problem:
        try:
            sub = read_submission(path)
        except Exception as exc:
            problem = f"not a readable notebook: {type(exc).__name__}: {_short(str(exc), 200)}"
    if problem or lesson is None:
        report["status"] = "unreadable" if "readable" in problem else "not graded"
        report["execution"]["stopped"] = problem
        for e in (lesson.exercises if lesson else []):
            report["exercises"].append({**_row(e, rubric), "status": report["status"], "reason": problem})
        sub = nbformat.v4.new_notebook()
    else:
        warning = wrong_lesson(sub, lesson, lessons or [lesson])
        if warning:
            report["status"] = "wrong lesson"
            report["warnings"].append(warning)
        timeouts = {"define": cell_timeout, "case": case_timeout, "total": total_timeout, "sandbox": boxed}
        for e in lesson.exercises:
            try:
                report["exercises"].append(grade_exercise(e, sub, lesson, seed, timeouts, report["execution"]))
            except Exception as exc:  # a grader bug on one odd submission: a row, not a crashed batch
                report["exercises"].append({**_row(e, rubric), "status": "error",
                                            "reason": f"the grader failed on this exercise: {type(exc).__name__}: {exc}"})
    for q in (lesson.questions if lesson else []):
        status, answer = _answer(q, lesson, sub)
        report["questions"].append({"label": q.label, "question": q.prompt, "status": status, "answer": answer,
                                    "max_points": rubric["question"] if q.points is None else q.points,
                                    "reference": q.reference})
    auto = sum(r["points"] for r in report["exercises"])
    auto_max = sum(r["max_points"] for r in report["exercises"])
    manual_max = sum(r["manual_points_max"] for r in report["exercises"]) + sum(q["max_points"] for q in report["questions"])
    report.update(auto_points=round(auto, 2), auto_max=auto_max, manual_max=manual_max, total_max=auto_max + manual_max,
                  pass_mark=round(rubric["pass_fraction"] * (auto_max + manual_max), 2))
    return report


def _load_answers() -> None:
    """Import every module of radixlab (the ``answers_*`` among them) before any student code runs:
    a file changed on disk later is never executed by this process, not even by a drive that
    imports lazily (and the fingerprint check reports the change)."""
    import importlib
    import pkgutil

    root = importlib.import_module(__package__.split(".")[0])
    for info in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
        importlib.import_module(info.name)


# Files that are data, not code: a concurrent ``bench tree --save`` may rewrite a record while grading.
_DATA_SUFFIXES = (".json", ".png", ".svg", ".txt", ".md", ".csv")


def forged_bytecode(root: Path | None = None) -> list[str]:
    """The ``.pyc`` files under ``root`` that Python would load in place of their source (right
    magic number, header matching the source) but that do not hold what the source compiles to."""
    root = root or Path(__file__).resolve().parents[1]
    return sorted(str(p.relative_to(root)) for p in root.rglob("__pycache__/*.pyc") if _forged_pyc(p))


def _forged_pyc(pyc: Path) -> bool:
    import importlib.util
    import marshal

    try:
        source = Path(importlib.util.source_from_cache(str(pyc)))
        data, src = pyc.read_bytes(), source.read_bytes()
        stat = source.stat()
    except (ValueError, NotImplementedError, OSError):  # not a name Python reads, or no source: never loaded
        return False
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return False  # another Python's bytecode: this one recompiles
    flags = int.from_bytes(data[4:8], "little")
    if flags == 0 and data[8:16] != ((int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                                     + (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")):
        return False  # stale (the source changed since): Python recompiles instead of loading it
    if flags & 0b10 and data[8:16] != importlib.util.source_hash(src):
        return False  # a checked hash-based .pyc of other source: Python recompiles
    optimize = int(pyc.name.split(".opt-")[1].split(".")[0]) if ".opt-" in pyc.name else 0
    try:
        return marshal.loads(data[16:]) != compile(src, str(source), "exec", dont_inherit=True, optimize=optimize)
    except Exception:  # unreadable bytecode, or source that no longer compiles: not what it should be
        return True


def package_fingerprint(root: Path | None = None) -> str:
    """A hash of radixlab's installed package: the grader checks that no submission changed it.

    Every code file counts (a new, changed or removed ``.py``, a sourceless ``.pyc``, a native
    module), every symbolic link (by its target: a linked folder is not walked into, and would
    hide what it points to), and every ``.pyc`` that Python would load but that is not what its
    source compiles to (``forged_bytecode``: it would run in place of the source in the next
    process). Honest bytecode written meanwhile (a notebook kernel importing radixlab) does not
    count; neither do data files (``_DATA_SUFFIXES``). Executors write no bytecode
    (``runner.executor_argv``), nor does the grader once grading starts (``main``).
    """
    import hashlib

    root = root or Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):  # followlinks=False
        dirnames.sort()
        here = Path(dirpath)
        for name in sorted(dirnames + filenames):
            path = here / name
            try:
                if path.is_symlink():
                    entry = "link to " + os.readlink(path)
                elif name in dirnames or path.suffix in _DATA_SUFFIXES:
                    continue
                elif here.name == "__pycache__":
                    if not _forged_pyc(path):
                        continue
                    entry = "forged bytecode"
                else:
                    entry = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError as exc:  # vanished or unreadable meanwhile: a change
                entry = f"unreadable ({type(exc).__name__})"
            h.update(f"{path.relative_to(root)}\0{entry}\0".encode())
    return h.hexdigest()


def read_submission(path: Path) -> nbformat.NotebookNode:
    """The submission as a notebook (every cell given the fields a hand-edited file may lack)."""
    sub = nbformat.read(path, as_version=4)
    for cell in sub.cells:
        cell.setdefault("metadata", {})
        cell.setdefault("source", "")
        if isinstance(cell.source, list):
            cell.source = "".join(cell.source)
    return sub


# -- 3. print -----------------------------------------------------------------------------------------


def _short(s: str, n: int) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _question_text(q: dict) -> str:
    """The question without markdown emphasis and without its own label ("**Q1** Why ..." -> "Why ...")."""
    text = re.sub(r"\*\*|__|[*#`>]", "", q["question"]).strip()
    return re.sub(rf"^{re.escape(q['label'])}[\s.:：]*", "", text).strip() or text


def summary(reports: list[dict]) -> str:
    """One line per submission: the gradebook view of a batch."""
    rows = [("submission", "lesson", "auto", "manual", "notes")]
    for r in reports:
        notes = [f"{e['exercise']} {e['status']}" for e in r["exercises"] if e["status"] != "passed"]
        notes += [f"cell {e['cell']} {e['ename']}" for e in r["execution"].get("errors", [])]
        notes = r["execution"].get("stopped", "") or ", ".join(r.get("warnings", [])[:1] + notes)
        rows.append((Path(r["submission"]).name, r["lesson"], f"{r['auto_points']:g}/{r['auto_max']:g}",
                     f"_/{r['manual_max']:g}", _short(notes, 60)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in rows)


def format_report(rep: dict) -> str:
    ex = rep["execution"]
    box = rep.get("sandbox", "")
    lines = [f"== {rep['submission']}  (lesson {rep['lesson']}: {rep['title']})",
             "   student code ran in bubblewrap on a copy of radixlab without the exercises' references"
             if box == "bubblewrap" else f"   ⚠ NO SANDBOX: {box.removeprefix('none ')}; student code ran unconfined "
             "(it could read the repository and change this machine; the grader checked the environment for changes)",
             f"   graded {len(rep['exercises'])} exercise(s) in {ex.get('seconds', 0):g} s (grader seed {rep.get('grader_seed', 0)})"
             + (f"; {len(ex.get('errors', []))} statement(s) raised" if ex.get("errors") else "")
             + (f"; stopped: {ex['stopped']}" if ex.get("stopped") else "")]
    lines += [f"   ⚠ {w}" for w in rep.get("warnings", [])]
    for e in ex.get("errors", [])[:5]:
        lines.append(f"   cell {e['cell']}: {e['ename']}: {_short(e['evalue'], 80)}")
    rows = [("item", "kind", "points", "notes")]
    for r in rep["exercises"]:
        mark = {"passed": "✅", "failed": "❌", "not done": "⏳"}.get(r["status"], "⛔")
        rows.append((f"Exercise {r['exercise']} {r['title']}", "code", f"{r['points']:g}/{r['max_points']:g}",
                     f"{mark} {r['status']}" + (f": {_short(r['reason'], 90)}" if r["reason"] else "")))
        if r["status"] in ("passed", "failed"):
            rows.append(("  main path (seed asserts)", "", f"{r['main_path']:g}", ""))
            rows.append(("  boundary cases (hidden)", "", f"{r['boundary']:g}", ""))
            for c in r["cases"]:
                if not c["passed"]:
                    rows.append((f"    ✗ {_short(c['name'], 50)}", "", f"0/{c['points']:g}", _short(c["message"], 90)))
        for note in r.get("notes", []):
            rows.append(("  note", "", "", note))
        rows.append(("  mapping to source objects", "manual", f"_/{r['manual_points_max']:g}", "mark by hand"))
    for q in rep["questions"]:
        rows.append((f"{q['label']} {_short(_question_text(q), 40)}", "written", f"_/{q['max_points']:g}",
                     q["status"] if q["status"] != "answered" else f"answered ({len(q['answer'].split())} words)"))
    if len(rows) == 1:
        rows.append(("(nothing to grade in this lesson)", "", "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        lines.append("   " + "  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
    lines.append(f"   automatic {rep['auto_points']:g}/{rep['auto_max']:g}, manual _/{rep['manual_max']:g}, "
                 f"total _/{rep['total_max']:g} (pass at {rep['pass_mark']:g})")
    for q in rep["questions"]:
        lines.append(f"   --- {q['label']} ({q['max_points']:g} pt): {_short(_question_text(q), 100)}")
        lines.extend("       " + l for l in (q["answer"].splitlines() or [""]))
    return "\n".join(lines)


def default_notebooks_dir() -> Path:
    here = Path("notebooks")
    return here if here.is_dir() else Path(__file__).resolve().parents[2] / "notebooks"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m radixlab grade", description=__doc__.split("\n\n")[0],
                                epilog="See the README, section 'For instructors', for how grading works.")
    p.add_argument("submissions", nargs="+", help="student notebooks (.ipynb)")
    p.add_argument("--notebooks", type=Path, default=None, help="instructor edition folder (default: notebooks/)")
    p.add_argument("--lesson", help="grade every submission as this lesson (NN or file name)")
    p.add_argument("--timeout", type=float, default=60,
                   help="seconds to define an exercise function with its imports and helpers (default 60)")
    p.add_argument("--case-timeout", type=float, default=None,
                   help="seconds per graded case (default: each exercise's own limit, 10 s)")
    p.add_argument("--total-timeout", type=float, default=600, help="seconds per notebook (default 600)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed for the hidden cases (default: a fresh one per run, printed in the report)")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run student code without bubblewrap even where it works (the reports say so)")
    p.add_argument("--json", dest="json_out", help="also write the reports as JSON to FILE ('-' = stdout only JSON)")
    return p


def main(argv: list[str] | None = None) -> int:
    before, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # what the grader imports from here on
    try:                                                             # leaves radixlab's files as they are
        return _grade(argv)
    finally:
        sys.dont_write_bytecode = before


def _grade(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    # First, before any radixlab module the grader has not loaded yet is imported: forged bytecode
    # left by an earlier run would otherwise run in place of its source (the modules imported to get
    # here stay exposed: grade untrusted work in a container).
    forged = forged_bytecode()
    if forged:
        print(f"error: radixlab's bytecode cache holds files that are not what their sources compile to "
              f"({', '.join(forged[:5])}): delete radixlab's __pycache__ folders, reinstall radixlab, "
              "and grade again", file=sys.stderr)
        return 2
    planted = sandbox_mod.unowned_startup_files()
    if planted:
        print(f"error: Python runs these startup files, which no installed package owns: {', '.join(planted[:5])}. "
              "A submission graded without a sandbox may have planted them: remove them (or reinstall the package "
              "that should own them) and grade again", file=sys.stderr)
        return 2
    try:
        folder = args.notebooks or default_notebooks_dir()
        if not folder.is_dir():
            raise UsageError(f"instructor notebooks folder not found: {folder} (pass --notebooks DIR)")
        if args.timeout <= 0 or args.total_timeout <= 0 or (args.case_timeout is not None and args.case_timeout <= 0):
            raise UsageError("--timeout, --case-timeout and --total-timeout must be positive")
        all_specs()  # the exercise specs (every radixlab module is imported below, before any student code)
        lessons = [load_lesson(f) for f in sorted(folder.glob("*.ipynb"))]
        if not lessons:
            raise UsageError(f"no notebooks in {folder}")
        if args.lesson:
            find_lesson(Path(args.lesson), lessons, args.lesson)  # an unknown --lesson is misuse
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
    jobs = []
    for s in map(Path, args.submissions):  # read every file before running anything (a run cannot rewrite them)
        nb, problem, lesson = None, "", None
        if not s.is_file():
            problem = "submission not found"
        else:
            try:
                nb = read_submission(s)
            except Exception as exc:
                problem = f"not a readable notebook: {type(exc).__name__}: {_short(str(exc), 200)}"
        try:
            lesson = find_lesson(s, lessons, args.lesson, nb)
        except UsageError as exc:
            problem = problem or str(exc)
        jobs.append((s, lesson, nb, problem))
    _load_answers()
    box = None if not args.no_sandbox else False
    boxed = box is not False and sandbox_mod.sandboxed()

    def fingerprint_now() -> str:  # unsandboxed, a submission could change any file the next run loads
        return package_fingerprint() + ("" if boxed else sandbox_mod.environment_fingerprint())

    reports, fingerprint, tampered = [], fingerprint_now(), ""
    for s, lesson, nb, problem in jobs:
        if tampered:
            problem = f"not graded: radixlab's files or the Python environment changed while grading {tampered}"
        try:
            rep = grade_submission(s, lesson, args.timeout, args.total_timeout, case_timeout=args.case_timeout,
                                   seed=seed, lessons=lessons, nb=nb, problem=problem, sandbox=box)
        except Exception as exc:  # a grader bug on one submission: its own report, the batch goes on
            rep = grade_submission(s, lesson, problem=f"the grader failed on this submission: "
                                   f"{type(exc).__name__}: {_short(str(exc), 200)}", sandbox=box, seed=seed)
        if not tampered and fingerprint_now() != fingerprint:
            tampered = str(s)
            rep["status"] = "tampered"
            rep["warnings"].append("radixlab's files or the Python environment (site-packages, .pth, sitecustomize) "
                                   "changed while this submission ran: its grades and every later one are void; "
                                   "reinstall and grade again")
            for r in rep["exercises"]:
                r.update(points=0.0, main_path=0.0, boundary=0.0, status="tampered", reason=rep["warnings"][-1])
            rep["auto_points"] = 0.0
        reports.append(rep)
        if args.json_out != "-":
            print(format_report(rep) + "\n", flush=True)
        if args.json_out and args.json_out != "-":  # written as each submission is graded: a crash later keeps it
            _write_json(Path(args.json_out), reports, done=False)
    if len(reports) > 1 and args.json_out != "-":
        print(summary(reports))
    if args.json_out == "-":
        print(json.dumps({"grader": "radixlab", "complete": True, "reports": reports}, indent=1, ensure_ascii=False,
                         default=str))
    elif args.json_out:
        _write_json(Path(args.json_out), reports, done=True)
        print(f"wrote {args.json_out}")
    return 0


def _write_json(path: Path, reports: list[dict], done: bool) -> None:
    """The reports so far, replacing the file atomically (``complete`` is false until the last one)."""
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps({"grader": "radixlab", "complete": done, "reports": reports}, indent=1,
                              ensure_ascii=False, default=str), encoding="utf-8")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
