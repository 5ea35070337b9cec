"""The course contract: notebook structure, stored outputs, student editions and exercise checks."""

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

from radixlab.course.catalog import COURSE, course_map
from radixlab.course.edition import blank_solutions, make_student_edition, student_notebook, strip_markers
from radixlab.course.execute import execute_notebook
from radixlab.course.exercises import by_check

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
CHECK_CALL = re.compile(r"^check_\w+\(", re.M)


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    return output.get("data", {}).get("text/plain", "")


def _exercise_id(check: str) -> str:
    """The id of the exercise a check function grades (every course check has an ExerciseSpec)."""
    spec = by_check(check)
    assert spec is not None, f"{check}() has no ExerciseSpec"
    return spec.id


def _exercise_cells(nb):
    """Indexes of check cells (a line starting with ``check_...(``)."""
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and CHECK_CALL.search(c.source)]


def test_catalog_matches_the_notebooks_folder():
    assert [p.stem for p in NOTEBOOKS] == [lesson.notebook for lesson in COURSE]
    assert all(lesson.notebook in course_map() for lesson in COURSE)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_structure_and_stored_outputs(path):
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and "Learning goals" in first.source and "Prerequisites" in first.source
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "Where this lives in SGLang" in text and "Recap" in text
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        assert cell.execution_count is not None, f"cell {i} is not executed (run make execute-notebooks)"
        for out in cell.outputs:
            assert out.output_type != "error", f"cell {i} stores an error"
            assert not re.search(r" at 0x[0-9a-f]+", _text(out)), f"cell {i} shows a memory address"
            for path in {str(ROOT), sys.prefix, sys.base_prefix, str(Path.home())}:
                assert path not in json.dumps(out), f"cell {i} shows a machine path ({path})"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_exercise_has_a_passing_check_in_the_instructor_edition(path):
    nb = nbformat.read(path, as_version=4)
    solution_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "### BEGIN SOLUTION" in c.source]
    checks = _exercise_cells(nb)
    for i in solution_cells:
        assert any(0 < j - i <= 3 for j in checks), f"cell {i} has a solution but no check cell after it"
    for j in checks:
        verdicts = [_text(o) for o in nb.cells[j].outputs]
        assert any(v.startswith("✅ Exercise") for v in verdicts), f"check cell {j} did not pass: {verdicts}"


def test_blank_solutions_keeps_indentation_and_the_rest():
    src = "def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    return x + y\n    ### END SOLUTION\n"
    assert blank_solutions(src) == "def f(x):\n    y = 1\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    assert strip_markers(src) == "def f(x):\n    y = 1\n    return x + y"
    with pytest.raises(ValueError, match="never closed"):
        blank_solutions("### BEGIN SOLUTION\nx = 1")
    with pytest.raises(ValueError, match="without"):
        blank_solutions("x = 1\n### END SOLUTION")


def test_student_notebook_removes_answers_and_outputs():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("**Q1** why?"),
        nbformat.v4.new_markdown_cell("secret reference answer", metadata={"tags": ["solution"]}),
        nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION",
                                  outputs=[nbformat.v4.new_output("stream", text="42")], execution_count=3),
    ])
    student = student_notebook(nb)
    dumped = json.dumps(student)
    assert "secret" not in dumped and "return 42" not in dumped and "BEGIN SOLUTION" not in dumped
    assert student.cells[1].source.startswith("**Your answer:**")
    assert student.cells[2].outputs == [] and student.cells[2].execution_count is None
    assert "return 42" in nb.cells[2].source  # the input is untouched


def test_student_edition_refuses_to_overwrite_instructor_notebooks(tmp_path):
    with pytest.raises(ValueError, match="out must not be"):
        make_student_edition(NOTEBOOK_DIR, NOTEBOOK_DIR)
    with pytest.raises(ValueError, match="out must not be"):
        make_student_edition(NOTEBOOK_DIR / NOTEBOOKS[0].name, NOTEBOOK_DIR)
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "02_cow_split.ipynb").write_bytes((NOTEBOOK_DIR / "02_cow_split.ipynb").read_bytes())
    with pytest.raises(ValueError, match="out must not be"):
        make_student_edition(NOTEBOOK_DIR, copy, force=True)
    # without --force a notebook that exists is never written: the copy's solutions stay as they were
    original = (NOTEBOOK_DIR / "02_cow_split.ipynb").read_bytes()
    assert make_student_edition(NOTEBOOK_DIR / "02_cow_split.ipynb", copy) == []
    assert (copy / "02_cow_split.ipynb").read_bytes() == original
    with pytest.raises(FileNotFoundError, match="src"):
        make_student_edition(tmp_path / "missing", tmp_path / "out")


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    written = make_student_edition(NOTEBOOK_DIR, out)
    assert [p.name for p in written] == [p.name for p in NOTEBOOKS]
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_edition_has_no_solutions(student_dir, path):
    nb = nbformat.read(student_dir / path.name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not any("### BEGIN SOLUTION" in c.source or "### END SOLUTION" in c.source for c in code)
    assert not any("solution" in c.metadata.get("tags", []) for c in nb.cells)
    assert "Reference answer" not in "".join(c.source for c in nb.cells)
    assert all(not c.outputs and c.execution_count is None for c in code)
    assert "widgets" not in nb.metadata, "notebook-level widget state carries the instructor's outputs"


def test_student_notebook_drops_notebook_level_widget_state():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"m": {"svg": "<svg/>"}}}}
    assert "widgets" not in student_notebook(nb).metadata and "widgets" in nb.metadata


def _has_exercise(path: Path) -> bool:
    nb = nbformat.read(path, as_version=4)
    return any(c.cell_type == "code" and "### BEGIN SOLUTION" in c.source for c in nb.cells)


EXERCISE_NOTEBOOKS = [p for p in NOTEBOOKS if _has_exercise(p)]


@pytest.mark.parametrize("path", EXERCISE_NOTEBOOKS, ids=lambda p: p.stem)
def test_every_check_says_not_done_yet_in_the_executed_student_edition(student_dir, path):
    nb = execute_notebook(student_dir / path.name, timeout=300)  # raises on any cell error
    checks = _exercise_cells(nb)
    assert checks, "exercise notebook without check cells"
    for j in checks:
        verdict = "\n".join(_text(o) for o in nb.cells[j].outputs)
        want_id = _exercise_id(CHECK_CALL.search(nb.cells[j].source).group(0)[:-1])  # the registry's id
        assert verdict.startswith(f"⏳ Exercise {want_id}") and "not done yet" in verdict, verdict
        assert "Traceback" not in verdict


@pytest.mark.parametrize("path", EXERCISE_NOTEBOOKS, ids=lambda p: p.stem)
def test_exercise_ids_follow_the_notebook_number(path):
    """Exercise NN.k lives in notebook NN (05.1 became 06.1 when eviction moved to notebook 06)."""
    if path.stem == "05_locks_and_eviction":
        pytest.skip("the eviction exercise (06.1) moves to notebooks/06_eviction.ipynb (issue 12 §5)")
    nb = nbformat.read(path, as_version=4)
    for j in _exercise_cells(nb):
        exercise = _exercise_id(CHECK_CALL.search(nb.cells[j].source).group(0)[:-1])
        assert exercise.split(".")[0] == path.stem[:2], (path.stem, exercise)


def test_the_course_map_states_each_notebooks_own_time():
    """Notebook 00 prints the map; each row's minutes are the time the notebook's first cell states."""
    import re

    from radixlab.course.catalog import COURSE

    for lesson in COURSE:
        nb = nbformat.read(NOTEBOOK_DIR / f"{lesson.notebook}.ipynb", as_version=4)
        stated = re.search(r"about (\d+) minutes", nb.cells[0].source, re.IGNORECASE)
        assert stated, f"{lesson.notebook}: cell 0 states no time ('about N minutes')"
        assert int(stated.group(1)) == lesson.minutes, (lesson.notebook, stated.group(0), lesson.minutes)


UNSEEN_SOURCE = re.compile(r"\bthe seeds?\b|\bseed(?:'s|\s+lessons?\b|\s+adv05|\s+Q\d)|\badv05\b|\blesson 4\b"
                           r"|\bstep ?13\b|\bfigure 4-\d\b", re.I)
# Notebooks whose student path is checked: all of them.
NAMES_CHECKED = ("00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11")


def _student_path(nb):
    """(index, text) of the cells a student reads on the core path: markdown and code before
    '## Going further', without cells tagged ``solution`` (reference answers)."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith("## Going further"):
            return
        if "solution" in cell.get("metadata", {}).get("tags", []):
            continue
        yield i, cell.source


def test_the_course_map_names_no_unseen_source():
    """Notebook 00 prints the course map on its core path: its texts speak the course's words too."""
    found = UNSEEN_SOURCE.search(course_map())
    assert not found, course_map()[max(0, found.start() - 60):found.end() + 60]


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.stem[:2] in NAMES_CHECKED], ids=lambda p: p.stem)
def test_the_student_path_names_no_unseen_source(path):
    """Students never see the two source lessons: notebook 00 names them ('the tree lesson', 'the
    engine lesson'), and no cell on the core path says 'the seed', 'lesson 4', 'adv05', 'step13' or
    'figure 4-1' (a reference a student cannot follow), nor shows nbval's marker comment."""
    nb = nbformat.read(path, as_version=4)
    for i, text in _student_path(nb):
        found = UNSEEN_SOURCE.search(text)
        assert not found, f"cell {i}: {text[max(0, found.start() - 60):found.end() + 60]!r}"
        assert "NBVAL_" not in text, f"cell {i} shows an nbval marker comment (use the cell tag)"
    if path.stem.startswith("00"):
        intro = "\n".join(t for _, t in _student_path(nb))
        assert "tree lesson" in intro and "engine lesson" in intro, "00 does not introduce the source lessons"
