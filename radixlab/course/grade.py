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
import sys
from pathlib import Path

import nbformat

from . import sandbox as sandbox_mod
from .edition import ANSWER_PLACEHOLDER
from .exercises import all_specs
from .extract import extract
from .lesson import (CHECK_CALL, DEFAULT_RUBRIC, Exercise, Lesson, Question, UsageError,  # noqa: F401
                     find_lesson, load_lesson, wrong_lesson)
from .report import _short, format_report, summary
from .runner import run_exercise
from .runs import plan
from .spec import expected, outcomes_for
from .tamper import environment_fingerprint, forged_bytecode, package_fingerprint, unowned_startup_files


# -- 2. score (running a submission: runner.py) -----------------------------------------------------


def _code_cells(sub: nbformat.NotebookNode) -> list[tuple[int, str]]:
    return [(i, c.source) for i, c in enumerate(sub.cells) if c.cell_type == "code" and c.source.strip()]


def _row(exp: Exercise, rubric: dict) -> dict:
    return {"optional": bool(exp.spec and exp.spec.optional), "exercise": exp.id, "title": exp.title, "check": exp.check, "points": 0.0,
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
    # The expected answers, from the grader's own radixlab, through JSON like the executor's answers;
    # computed before any student code runs, so nothing that code does can reach them.
    wants = [expected(spec, c.args) for c in cases]
    jobs, oracles, outcomes = plan(spec, cases)  # an oracle spec's jobs are its runs (runs.py)
    left = max(1.0, timeouts["total"] - execution["seconds"])
    run = run_exercise(spec.id, spec.function, ex.cells, [(s.cell, s.index, s.keep) for s in ex.statements], jobs,
                       timeouts["case"] or spec.time_limit, timeouts["define"], left,
                       drive=f"{spec.drive.__module__}:{spec.drive.__qualname__}", strip=spec.all_stripped(),
                       roots=spec.copy_roots(), sandbox=timeouts.get("sandbox"), oracles=oracles)
    execution["seconds"] = round(execution["seconds"] + run.seconds, 2)
    execution["cells_run"] = max(execution["cells_run"], len(ex.cells))
    execution["errors"] += run.errors
    if run.stopped and not execution["stopped"]:
        execution["stopped"] = f"{spec.id}: {run.stopped}"
    if not run.defined:
        row.update(status="error", reason="the exercise function could not be defined: "
                   + ("; ".join(f"cell {e['cell']} raised {e['ename']}: {e['evalue']}" for e in run.errors) or run.stopped))
        return row
    result = outcomes_for(spec, cases, outcomes(run.outcomes), wants, rubric)
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
    counted = [r for r in report["exercises"] if not r.get("optional")]  # optional ones count in no total
    auto = sum(r["points"] for r in counted)
    auto_max = sum(r["max_points"] for r in counted)
    manual_max = sum(r["manual_points_max"] for r in counted) + sum(q["max_points"] for q in report["questions"])
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


def read_submission(path: Path) -> nbformat.NotebookNode:
    """The submission as a notebook (every cell given the fields a hand-edited file may lack)."""
    sub = nbformat.read(path, as_version=4)
    for cell in sub.cells:
        cell.setdefault("metadata", {})
        cell.setdefault("source", "")
        if isinstance(cell.source, list):
            cell.source = "".join(cell.source)
    return sub


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
    if not hasattr(os, "killpg"):  # the executor's process control (groups, signals) is POSIX's
        print("error: radixlab grade needs a POSIX system (Linux, or macOS without the sandbox); "
              "on Windows, grade inside WSL", file=sys.stderr)
        return 2
    # First, before any radixlab module the grader has not loaded yet is imported: forged bytecode
    # left by an earlier run would otherwise run in place of its source (the modules imported to get
    # here stay exposed: grade untrusted work in a container).
    forged = forged_bytecode()
    if forged:
        print(f"error: radixlab's bytecode cache holds files that are not what their sources compile to "
              f"({', '.join(forged[:5])}): delete radixlab's __pycache__ folders, reinstall radixlab, "
              "and grade again", file=sys.stderr)
        return 2
    planted = unowned_startup_files()
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
        return package_fingerprint() + ("" if boxed else environment_fingerprint())

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
