"""Grade student submissions: run each notebook in a fresh kernel, score the checks, list the answers.

    python -m radixlab grade SUBMISSION.ipynb [...] [--json FILE|-] [--timeout S] [--total-timeout S]

For each submission the grader (1) finds its lesson, the instructor notebook of the same name (or
title) in ``notebooks/``, and reads from it which exercises and written questions to expect;
(2) executes the submission top to bottom in a fresh kernel, in an empty temporary folder, with a
per-cell and a total time limit, errors allowed, and after every cell reads
``radixlab.course.check.RESULTS`` (the verdicts, hidden cases included) from the kernel; (3) scores
each exercise by the lesson rubric and lists each written answer for manual marking.

Rubric (lesson 4 of the seeds, applied to every exercise and question of the course): code 4 points
= main path 2 (the seed's visible asserts) + boundary cases 1 (the hidden edge cases) + mapping to
source objects 1 (manual); each written question 2 points (manual); pass at 80 %. A notebook can
override the numbers in its metadata: ``{"radixlab": {"rubric": {"main": 2, ...}}}``.

A submission that loops, raises, kills its kernel or lost cells still gets a report with a reason on
every row; the exit code is 0 unless the grader itself was misused (exit 2).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat

from .edition import ANSWER_PLACEHOLDER, is_solution_cell
from .runner import Execution, _text, execute

VERDICT = re.compile(r"^[✅⏳❌] Exercise (\S+) \((.*?)\):", re.M)
SCORE = re.compile(r"Score ([\d.]+)/([\d.]+)")
CHECK_CALL = re.compile(r"(?<!def )\b(check_\w+)\s*\(")
DEFAULT_RUBRIC = {"main": 2.0, "boundary": 1.0, "mapping": 1.0, "question": 2.0, "pass_fraction": 0.8}


class UsageError(Exception):
    """The grader was called wrongly (bad path, unknown lesson): exit 2 with this message."""


# -- 1. the lesson: what the instructor edition expects ---------------------------------------------


@dataclass
class Exercise:
    id: str
    title: str
    check: str  # the check function the cell calls, e.g. "check_longest_cached_prefix"
    max_check_score: float | None = None


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


def _first_heading(nb: nbformat.NotebookNode) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.strip():
            return cell.source.strip().splitlines()[0].lstrip("# ").strip()
    return ""


def load_lesson(path: Path) -> Lesson:
    """Read the exercises (from the stored check verdicts) and the written questions of one notebook."""
    nb = nbformat.read(path, as_version=4)
    exercises: list[Exercise] = []
    questions: list[Question] = []
    problem = ""
    for i, cell in enumerate(nb.cells):
        if is_solution_cell(cell):
            prev = nb.cells[i - 1].source.strip() if i > 0 else ""
            label, prompt = _question(prev, len(questions) + 1)
            points = cell.get("metadata", {}).get("radixlab", {}).get("points")
            questions.append(Question(label, prev, prompt, cell.source.strip(), points))
        if cell.cell_type != "code":
            continue
        calls = CHECK_CALL.findall(cell.source)
        for out in cell.get("outputs", []):
            text = _text(out)
            for m in VERDICT.finditer(text):
                score = SCORE.search(text[m.start():])
                exercises.append(Exercise(m.group(1), m.group(2), calls[-1] if calls else "",
                                          float(score.group(2)) if score else None))
        if calls and not any(e.check == calls[-1] for e in exercises) and not problem:
            problem = (f"{path}: cell {i} calls {calls[-1]}() but holds no stored verdict; "
                       "execute the instructor notebook first (make execute-notebooks)")
    rubric = {**DEFAULT_RUBRIC, **nb.metadata.get("radixlab", {}).get("rubric", {})}
    return Lesson(path.stem, path, _first_heading(nb), exercises, questions, rubric,
                  {c.source.strip() for c in nb.cells if not is_solution_cell(c)},
                  problem)


def find_lesson(submission: Path, lessons: list[Lesson], name: str | None = None) -> Lesson:
    """Same file name, else same title, else same ``NN_`` number; ``name`` (--lesson) overrides."""
    if name:
        hits = [l for l in lessons if l.name == Path(name).stem or l.name.startswith(f"{name}_")]
        if not hits:
            raise UsageError(f"--lesson {name!r} matches none of: {', '.join(l.name for l in lessons)}")
        return hits[0]
    for lesson in lessons:
        if lesson.name == submission.stem:
            return lesson
    try:
        title = _first_heading(nbformat.read(submission, as_version=4))
    except Exception:
        title = ""
    for lesson in lessons:
        if title and lesson.title == title:
            return lesson
    number = re.search(r"(?<!\d)(\d\d)_", submission.name)
    for lesson in lessons:
        if number and lesson.name.startswith(number.group(1) + "_"):
            return lesson
    raise UsageError(f"cannot tell which lesson {submission} is (no notebook of that name, title or NN_ "
                     "number); pass --lesson NN")


# -- 2. score (running a submission: runner.py) -----------------------------------------------------


def _score_exercise(exp: Exercise, ex: Execution, sub: nbformat.NotebookNode, rubric: dict) -> dict:
    auto_max = rubric["main"] + rubric["boundary"]
    row = {"exercise": exp.id, "title": exp.title, "check": exp.check, "points": 0.0, "max_points": auto_max,
           "manual_points_max": rubric["mapping"], "main_path": 0.0, "boundary": 0.0, "status": "", "reason": "",
           "check_score": 0.0, "check_max_score": exp.max_check_score, "cases": []}
    mine = [r for r in ex.results if r["exercise"] == exp.id]
    if mine:
        r = mine[-1]
        row.update(check_score=r["score"], check_max_score=r["max_score"], cases=r["cases"])
        if r["not_done"]:
            row.update(status="not done", reason="not done yet: the exercise still raises NotImplementedError")
            return row
        part = lambda c: c.get("part") or ("boundary" if c["hidden"] else "main")  # noqa: E731
        visible = [c for c in r["cases"] if part(c) == "main"]
        hidden = [c for c in r["cases"] if part(c) == "boundary"]
        mapping = [c for c in r["cases"] if part(c) == "mapping"]
        if mapping:  # the check's own evidence for the manual "mapping to source objects" point
            row["mapping_evidence"] = "passed" if all(c["passed"] for c in mapping) else "failed"
        frac = lambda cs: sum(c["earned"] for c in cs) / sum(c["points"] for c in cs) if cs else None  # noqa: E731
        main, boundary = frac(visible), frac(hidden)
        if boundary is None:  # no hidden cases: the whole code score rides on the visible ones
            row["main_path"] = round(auto_max * (main or 0), 2)
        else:
            row["main_path"] = round(rubric["main"] * (main if main is not None else boundary), 2)
            row["boundary"] = round(rubric["boundary"] * boundary, 2)
        row["points"] = round(row["main_path"] + row["boundary"], 2)
        failed = [c for c in r["cases"] if not c["passed"]]
        row["status"] = "passed" if not failed else "failed"
        row["reason"] = "; ".join(f"{'hidden ' if c['hidden'] else ''}'{c['name']}': {c['message']}" for c in failed)
        return row
    calls = [i for i, c in enumerate(sub.cells) if c.cell_type == "code" and exp.check in CHECK_CALL.findall(c.source)]
    if not calls:
        row.update(status="missing", reason=f"check cell missing: no cell calls {exp.check or 'its check'}() (deleted?)")
        return row
    err = next((e for e in ex.errors if e["cell"] == calls[-1]), None)
    if err:
        row.update(status="error", reason=f"check cell {calls[-1]} raised {err['ename']}: {err['evalue']}")
    else:
        row.update(status="not run", reason=f"check cell {calls[-1]} never ran"
                   + (f": {ex.stopped}" if ex.stopped else " (it recorded no verdict)"))
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


def grade_submission(path: Path, lesson: Lesson, cell_timeout: int = 60, total_timeout: int = 600) -> dict:
    """Execute one submission and build its report (a JSON-ready dict)."""
    report = {"submission": str(path), "lesson": lesson.name, "title": lesson.title, "status": "graded",
              "rubric": lesson.rubric, "execution": {}, "exercises": [], "questions": []}
    rubric = lesson.rubric
    try:
        sub = nbformat.read(path, as_version=4)
        for cell in sub.cells:  # normalise what a hand-edited file may lack
            cell.setdefault("metadata", {})
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
    except Exception as exc:
        report["status"] = "unreadable"
        sub, ex = nbformat.v4.new_notebook(), Execution(stopped=f"not a readable notebook: {type(exc).__name__}: {exc}")
    else:
        ex = execute(sub, cell_timeout, total_timeout)
    report["execution"] = {k: v for k, v in asdict(ex).items() if k != "results"}
    report["exercises"] = [_score_exercise(e, ex, sub, rubric) for e in lesson.exercises]
    if report["status"] == "unreadable":
        for row in report["exercises"]:
            row.update(status="unreadable", reason="the submission is not a readable notebook")
    for q in lesson.questions:
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
        notes = r["execution"].get("stopped", "") or ", ".join(notes)
        rows.append((Path(r["submission"]).name, r["lesson"], f"{r['auto_points']:g}/{r['auto_max']:g}",
                     f"_/{r['manual_max']:g}", _short(notes, 60)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in rows)


def format_report(rep: dict) -> str:
    ex = rep["execution"]
    lines = [f"== {rep['submission']}  (lesson {rep['lesson']}: {rep['title']})",
             f"   ran {ex.get('cells_run', 0)} code cells in {ex.get('seconds', 0):g} s"
             + (f"; {len(ex.get('errors', []))} cell(s) raised" if ex.get("errors") else "")
             + (f"; stopped: {ex['stopped']}" if ex.get("stopped") else "")]
    for e in ex.get("errors", [])[:5]:
        lines.append(f"   cell {e['cell']}: {e['ename']}: {_short(e['evalue'], 80)}")
    rows = [("item", "kind", "points", "notes")]
    for r in rep["exercises"]:
        mark = {"passed": "✅", "failed": "❌", "not done": "⏳"}.get(r["status"], "⛔")
        note = f"{mark} {r['status']}" + (f" (check {r['check_score']:g}/{r['check_max_score']:g})"
                                          if r["check_max_score"] and r["status"] in ("passed", "failed") else "")
        rows.append((f"Exercise {r['exercise']} {r['title']}", "code", f"{r['points']:g}/{r['max_points']:g}",
                     note + (f": {_short(r['reason'], 90)}" if r["reason"] else "")))
        if r["status"] in ("passed", "failed"):
            rows.append(("  main path (seed asserts)", "", f"{r['main_path']:g}", ""))
            rows.append(("  boundary cases (hidden)", "", f"{r['boundary']:g}", ""))
        evidence = r.get("mapping_evidence")
        rows.append(("  mapping to source objects", "manual", f"_/{r['manual_points_max']:g}",
                     "mark by hand" + (f" (its automatic case {evidence})" if evidence else "")))
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m radixlab grade", description=__doc__.splitlines()[0])
    p.add_argument("submissions", nargs="+", help="student notebooks (.ipynb)")
    p.add_argument("--notebooks", type=Path, default=None, help="instructor edition folder (default: notebooks/)")
    p.add_argument("--lesson", help="grade every submission as this lesson (NN or file name)")
    p.add_argument("--timeout", type=int, default=60, help="seconds per cell (default 60)")
    p.add_argument("--total-timeout", type=int, default=600, help="seconds per notebook (default 600)")
    p.add_argument("--json", dest="json_out", help="also write the reports as JSON to FILE ('-' = stdout only JSON)")
    args = p.parse_args(argv)
    try:
        folder = args.notebooks or default_notebooks_dir()
        if not folder.is_dir():
            raise UsageError(f"instructor notebooks folder not found: {folder} (pass --notebooks DIR)")
        lessons = [load_lesson(f) for f in sorted(folder.glob("*.ipynb"))]
        if not lessons:
            raise UsageError(f"no notebooks in {folder}")
        if args.timeout < 1 or args.total_timeout < 1:
            raise UsageError("--timeout and --total-timeout must be positive")
        jobs = []
        for s in map(Path, args.submissions):
            if not s.is_file():
                raise UsageError(f"submission not found: {s}")
            lesson = find_lesson(s, lessons, args.lesson)
            if lesson.problem:
                raise UsageError(lesson.problem)
            jobs.append((s, lesson))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    reports = []
    for s, lesson in jobs:
        rep = grade_submission(s, lesson, args.timeout, args.total_timeout)
        reports.append(rep)
        if args.json_out != "-":
            print(format_report(rep) + "\n", flush=True)
    if len(reports) > 1 and args.json_out != "-":
        print(summary(reports))
    doc = {"grader": "radixlab", "reports": reports}
    if args.json_out == "-":
        print(json.dumps(doc, indent=1, ensure_ascii=False))
    elif args.json_out:
        Path(args.json_out).write_text(json.dumps(doc, indent=1, ensure_ascii=False), encoding="utf-8")
        print(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
