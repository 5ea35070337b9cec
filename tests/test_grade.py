"""The grader (``python -m radixlab grade``) on a small two-exercise lesson built here.

Each scenario is one submission: the instructor edition (full marks), the blank student edition,
a wrong answer, an infinite loop, a raising cell and a submission whose check cell was deleted.
All are graded in one grader call (one fresh kernel each) to keep the suite quick.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from radixlab.course import grade
from radixlab.course.edition import student_notebook
from radixlab.course.execute import execute_notebook

CHECKS = '''from radixlab.course.check import Case, run_check, expect_equal, expect_raises

def check_double(fn):
    cases = [Case("double(2) == 4", lambda: expect_equal(fn(2), 4, "double(2)")),
             Case("double(-3) == -6", lambda: expect_equal(fn(-3), -6, "double(-3)")),
             Case("double('x') raises TypeError", lambda: expect_raises(TypeError, lambda: fn("x"), "double('x')"), hidden=True)]
    return run_check("99.1", "double", cases)

def check_aligned(fn):
    cases = [Case("aligned(7, 4) == 4", lambda: expect_equal(fn(7, 4), 4, "aligned(7, 4)")),
             Case("aligned(3, 4) == 0", lambda: expect_equal(fn(3, 4), 0, "aligned(3, 4)"), hidden=True)]
    return run_check("99.2", "aligned", cases)'''

DOUBLE = '''def double(x):
    ### BEGIN SOLUTION
    if not isinstance(x, (int, float)):
        raise TypeError(f"x must be a number, got {type(x).__name__}")
    return 2 * x
    ### END SOLUTION'''

ALIGNED = '''def aligned(n, page_size):
    ### BEGIN SOLUTION
    return n // page_size * page_size
    ### END SOLUTION'''

Q1 = "**Q1** Why must a page be full before it can be shared?"
REF1 = "Because the next decode step appends KV into the same page and would overwrite it."
Q2 = "**Q2** What does `extra_key` protect?"
REF2 = "The namespace: LoRA id, image hash, tenant."


def lesson_notebook() -> nbformat.NotebookNode:
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    cells = [md("# 99 · Grader test lesson\n\nLearning goals: none."), code(CHECKS),
             md("## Exercise 99.1"), code(DOUBLE), code("check_double(double)"),
             md(Q1), md(REF1), md("## Exercise 99.2"), code(ALIGNED), code("check_aligned(aligned)"),
             md(Q2), md(REF2), code("print('the end')")]
    for c in cells:
        if c.source in (REF1, REF2):
            c.metadata["tags"] = ["solution"]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Write the lesson (stored executed, like notebooks/) and six submissions; grade them all at once."""
    root = tmp_path_factory.mktemp("grade")
    instructor = root / "notebooks"
    instructor.mkdir()
    path = instructor / "99_grader_lesson.ipynb"
    nbformat.write(lesson_notebook(), path)
    nbformat.write(execute_notebook(path), path)

    student = student_notebook(nbformat.read(path, as_version=4))
    subs = root / "subs"
    subs.mkdir()

    def write(name, nb):
        nbformat.write(nb, subs / f"{name}.ipynb")
        return subs / f"{name}.ipynb"

    good = nbformat.read(path, as_version=4)
    write("good", good)
    write("blank", student)
    wrong = nbformat.read(path, as_version=4)
    wrong.cells[3].source = "def double(x):\n    return 2 * x if isinstance(x, int) and x > 0 else x\n"  # fails -3 and the hidden case
    wrong.cells[6] = nbformat.v4.new_markdown_cell("**Your answer:** the page is shared by the decode step.")
    write("wrong", wrong)
    loop = nbformat.read(path, as_version=4)
    loop.cells[3].source = DOUBLE + "\n\nwhile True:\n    pass\n"
    write("loop", loop)
    raising = nbformat.read(path, as_version=4)
    raising.cells[8].source = "def aligned(n, page_size):\n    return n // page_size * page_size\n1 / 0\n"
    raising.cells[3].source = "raise RuntimeError('oops in my cell')"
    write("raising", raising)
    deleted = nbformat.read(path, as_version=4)
    del deleted.cells[9]  # the check_aligned cell
    del deleted.cells[5:7]  # Q1 and its answer
    write("deleted", deleted)
    dies = nbformat.read(path, as_version=4)
    dies.cells.insert(5, nbformat.v4.new_code_cell("import os\nos._exit(3)"))
    write("dies", dies)
    (subs / "broken.ipynb").write_text("{ not json", encoding="utf-8")

    out = root / "grades.json"
    names = ["good", "blank", "wrong", "loop", "raising", "deleted", "dies", "broken"]
    rc = grade.main([str(subs / f"{n}.ipynb") for n in names]
                    + ["--notebooks", str(instructor), "--lesson", "99", "--timeout", "20", "--json", str(out)])
    assert rc == 0
    reports = json.loads(out.read_text())["reports"]
    return dict(zip(names, reports))


def rows(report):
    return {r["exercise"]: r for r in report["exercises"]}


def test_lesson_is_read_from_the_instructor_edition(graded):
    rep = graded["good"]
    assert [r["exercise"] for r in rep["exercises"]] == ["99.1", "99.2"]
    assert [q["label"] for q in rep["questions"]] == ["Q1", "Q2"]
    assert rep["auto_max"] == 6 and rep["manual_max"] == 2 + 4 and rep["total_max"] == 12
    assert rep["pass_mark"] == pytest.approx(9.6)


def test_instructor_edition_gets_full_automatic_marks(graded):
    rep = graded["good"]
    assert rep["auto_points"] == 6
    r = rows(rep)["99.1"]
    assert r["status"] == "passed" and r["main_path"] == 2 and r["boundary"] == 1
    assert r["check_score"] == r["check_max_score"] == 3
    assert any(c["hidden"] for c in r["cases"]), "hidden cases must reach the grader"
    assert rep["execution"]["errors"] == [] and rep["execution"]["stopped"] == ""
    assert rep["questions"][0]["answer"] == REF1  # the reference answer stands where a student's would


def test_blank_student_edition_scores_zero_not_done(graded):
    rep = graded["blank"]
    assert rep["auto_points"] == 0
    for r in rep["exercises"]:
        assert r["status"] == "not done" and "not done yet" in r["reason"]
    assert [q["status"] for q in rep["questions"]] == ["blank", "blank"]


def test_wrong_answer_loses_the_failing_cases(graded):
    rep = graded["wrong"]
    r = rows(rep)["99.1"]
    assert r["status"] == "failed"
    assert r["main_path"] == 1 and r["boundary"] == 0  # one of two seed asserts, no hidden case
    assert "double(-3)" in r["reason"] and "hidden" in r["reason"]
    assert rows(rep)["99.2"]["points"] == 3
    assert rep["questions"][0]["status"] == "answered"
    assert rep["questions"][0]["answer"] == "**Your answer:** the page is shared by the decode step."


def test_infinite_loop_is_interrupted_and_the_rest_still_graded(graded):
    rep = graded["loop"]
    errors = rep["execution"]["errors"]
    assert errors[0]["cell"] == 3 and errors[0]["ename"] == "Timeout"
    assert rows(rep)["99.1"]["points"] == 3  # `double` was defined before the loop started
    assert rows(rep)["99.2"]["points"] == 3


def test_raising_cells_give_clear_rows(graded):
    rep = graded["raising"]
    enames = {e["cell"]: e["ename"] for e in rep["execution"]["errors"]}
    assert enames == {3: "RuntimeError", 4: "NameError", 8: "ZeroDivisionError"}
    r = rows(rep)["99.1"]
    assert r["status"] == "error" and r["points"] == 0 and "NameError" in r["reason"]
    assert rows(rep)["99.2"]["points"] == 3  # the function was defined before the error


def test_deleted_check_cell_and_question_are_marked_missing(graded):
    rep = graded["deleted"]
    r = rows(rep)["99.2"]
    assert r["status"] == "missing" and r["points"] == 0 and "check_aligned" in r["reason"]
    assert rows(rep)["99.1"]["points"] == 3
    assert rep["questions"][0]["status"] == "missing"


def test_a_kernel_that_dies_stops_the_run_with_a_reason(graded):
    rep = graded["dies"]
    assert "kernel died" in rep["execution"]["stopped"]
    assert rows(rep)["99.1"]["points"] == 3  # scored before the kernel died
    r = rows(rep)["99.2"]
    assert r["status"] == "not run" and "kernel died" in r["reason"]


def test_unreadable_submission_is_a_row_not_a_crash(graded):
    rep = graded["broken"]
    assert rep["status"] == "unreadable" and rep["auto_points"] == 0
    assert "not a readable notebook" in rep["execution"]["stopped"]
    assert {r["status"] for r in rep["exercises"]} == {"unreadable"}


def test_table_names_every_item(graded, capsys):
    text = grade.format_report(graded["deleted"])
    assert "Exercise 99.2 aligned" in text and "check cell missing" in text
    assert "mapping to source objects" in text and "Q2" in text and "(question cell missing)" in text
    assert "pass at 9.6" in text
    assert "Q1 Why must a page be full" in text
    table = grade.summary(list(graded.values()))
    assert len(table.splitlines()) == 1 + len(graded) and "not a readable notebook" in table


def test_misuse_exits_2_with_a_message(tmp_path, capsys):
    assert grade.main([str(tmp_path / "nope.ipynb"), "--notebooks", str(tmp_path)]) == 2
    assert "no notebooks" in capsys.readouterr().err
    nb_dir = tmp_path / "nb"
    nb_dir.mkdir()
    nbformat.write(lesson_notebook(), nb_dir / "99_x.ipynb")  # not executed: no stored verdicts
    assert grade.main([str(nb_dir / "99_x.ipynb"), "--notebooks", str(nb_dir)]) == 2
    assert "execute the instructor notebook" in capsys.readouterr().err


def test_unknown_submission_path(tmp_path, capsys):
    nb_dir = tmp_path / "nb"
    nb_dir.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# t")]), nb_dir / "00_t.ipynb")
    assert grade.main([str(tmp_path / "missing.ipynb"), "--notebooks", str(nb_dir)]) == 2
    assert "submission not found" in capsys.readouterr().err
    other = tmp_path / "alice.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# other")]), other)
    assert grade.main([str(other), "--notebooks", str(nb_dir)]) == 2
    assert "pass --lesson" in capsys.readouterr().err


def test_every_course_notebook_is_gradable():
    """The grader reads each instructor notebook in notebooks/: exercises from stored verdicts, questions."""
    folder = Path(__file__).resolve().parents[1] / "notebooks"
    paths = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if not paths:
        pytest.skip("no notebooks yet")
    for path in paths:
        lesson = grade.load_lesson(path)
        assert lesson.problem == "", lesson.problem
        nb = nbformat.read(path, as_version=4)
        calls = [c for c in nb.cells if c.cell_type == "code" and grade.CHECK_CALL.search(c.source)]
        assert len(lesson.exercises) == len(calls), f"{path.name}: a check cell without a stored verdict"
        solutions = [c for c in nb.cells if "solution" in c.metadata.get("tags", [])]
        assert len(lesson.questions) == len(solutions)
        assert all(q.prompt for q in lesson.questions), f"{path.name}: a reference answer without a question before it"
        assert grade.find_lesson(path, [lesson]) is lesson


def test_ci_workflow_for_course_repositories():
    """The ready-made workflow parses, runs strict nbval on notebooks/ and builds and grades the student edition."""
    yaml = pytest.importorskip("yaml")
    path = Path(__file__).resolve().parents[1] / ".github" / "workflows" / "notebooks.yml"
    flow = yaml.safe_load(path.read_text())
    runs = "\n".join(step.get("run", "") for job in flow["jobs"].values() for step in job["steps"])
    assert "--nbval " in runs and "--nbval-lax" not in runs and "tests/nbval_sanitize.cfg" in runs
    assert "radixlab student notebooks -o build/student" in runs
    assert "radixlab grade build/student/" in runs
    assert "make test-browser" in runs and "playwright install" not in runs


def test_a_loop_that_swallows_interrupts_is_abandoned():
    """Ctrl-C caught in a loop: the kernel cannot be interrupted, so the grader gives up on it cleanly."""
    stuck = "import time\nwhile True:\n    try:\n        time.sleep(0.1)\n    except KeyboardInterrupt:\n        pass"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in ("print(1)", stuck, "print(2)")])
    ex = grade.execute(nb, cell_timeout=3, total_timeout=120)
    assert ex.errors == [{"cell": 1, "ename": "Timeout", "evalue": "ran past 3 s; interrupted"}]
    assert "KeyboardInterrupt" in ex.stopped and ex.cells_run == 2


def test_scoring_follows_each_case_rubric_part():
    """Main from the seed's cases, boundary from hidden edge cases; a mapping case is evidence only."""
    from radixlab.course.ex_prefix import check_longest_cached_prefix, reference_longest_cached_prefix
    from radixlab.course.grade import DEFAULT_RUBRIC, Exercise, _score_exercise
    from radixlab.course.runner import Execution

    def wrong_on_random_caches(q, ns, paths, p):  # right on every fixed case, wrong once paths get long
        return reference_longest_cached_prefix(q, ns, paths, p) if len(paths) <= 2 else 0

    result = check_longest_cached_prefix(wrong_on_random_caches, record=False)
    ex = Execution(results=[result.to_dict()])
    row = _score_exercise(Exercise("04.1", "longest_cached_prefix", "check_longest_cached_prefix"), ex,
                          nbformat.v4.new_notebook(), DEFAULT_RUBRIC)
    assert (row["main_path"], row["boundary"]) == (2.0, 1.0)
    assert row["mapping_evidence"] == "failed" and row["status"] == "failed"
