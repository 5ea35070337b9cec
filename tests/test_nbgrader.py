"""nbgrader works on the course: cell metadata, the check cells' scores under autograde, and the release.

The last test runs nbgrader itself (``generate_assignment`` on every notebook, ``autograde`` on a blank,
a right and a wrong submission of 02_cow_split) and compares its scores with ``radixlab grade``'s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from radixlab.course import nbgrader_meta
from radixlab.course.edition import has_solution_markers, is_solution_cell, strip_markers, student_notebook
from radixlab.course.ex_tree import SPEC as SPLIT, check_split
from radixlab.course.exercises import all_specs
from radixlab.course.rubric import RUBRIC, auto_points
from radixlab.course.spec import CheckResult, check_exercise
from radixlab.tree import RadixNode, RadixTree

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def grade_cells(nb: nbformat.NotebookNode) -> dict[str, dict]:
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells if "nbgrader" in c.metadata}


# -- the metadata ------------------------------------------------------------------------------------


def test_committed_metadata_is_up_to_date():
    stale = nbgrader_meta.update_files(NOTEBOOKS, check=True)
    assert not stale, f"run `python -m radixlab.course.nbgrader_meta notebooks/*.ipynb`: stale {stale}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_answer_check_and_written_answer_carries_nbgrader_metadata(path):
    nb = read(path)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if cell.cell_type == "code" and has_solution_markers(cell.source):
            assert meta and meta["solution"] and not meta["grade"], cell.source[:80]
        elif is_solution_cell(cell):
            assert meta and meta["solution"] and meta["grade"], cell.source[:80]
            optional = meta["grade_id"].endswith("_mapping") and all_specs()[
                meta["grade_id"][2:].rsplit("_", 1)[0].replace("_", ".")].optional
            assert meta["points"] == 0 if optional else meta["points"] > 0, (meta, cell.source[:80])
        elif cell.cell_type == "code" and nbgrader_meta._exercise_of_check(cell.source):
            assert meta and meta["grade"] and meta["locked"] and not meta["solution"]
            assert meta["points"] == auto_points(RUBRIC) == 3
        else:
            assert meta is None, cell.source[:80]


def test_grade_ids_and_points():
    nb = read(ROOT / "notebooks" / "01_radix_tree.ipynb")
    cells = grade_cells(nb)
    assert {"ex01_1_answer", "ex01_1_check", "ex01_1_mapping", "q1"} <= set(cells)
    # the follow-up is worth 0 in radixlab's metadata: it holds the exercise's mapping point
    assert cells["ex01_1_mapping"].metadata["nbgrader"]["points"] == RUBRIC["mapping"]
    assert cells["q1"].metadata["nbgrader"]["points"] == RUBRIC["question"]


def test_apply_is_idempotent_and_drops_stale_metadata():
    nb = read(ROOT / "notebooks" / "02_cow_split.ipynb")
    assert not nbgrader_meta.apply(nb)  # already up to date
    check = next(c for c in nb.cells if "check_split(" in c.source)
    check.source = "print('the check moved away')"
    nb.cells[0].metadata["nbgrader"] = {"grade": True}
    assert nbgrader_meta.apply(nb)
    assert "nbgrader" not in check.metadata and "nbgrader" not in nb.cells[0].metadata
    assert not nbgrader_meta.apply(nb)


def test_cli_check_and_update(tmp_path, capsys):
    target = tmp_path / "02_cow_split.ipynb"
    nb = read(ROOT / "notebooks" / "02_cow_split.ipynb")
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
    nbformat.write(nb, target)
    assert nbgrader_meta.main(["--check", str(target)]) == 1
    assert nbgrader_meta.main([str(target)]) == 0 and "updated" in capsys.readouterr().out
    assert nbgrader_meta.main(["--check", str(target)]) == 0
    fresh = read(target)
    assert [c.source for c in fresh.cells] == [c.source for c in nb.cells]  # metadata only
    assert [c.get("outputs") for c in fresh.cells] == [c.get("outputs") for c in nb.cells]
    with pytest.raises(SystemExit):
        nbgrader_meta.main([str(tmp_path / "missing.ipynb")])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_cell_mentions_a_solution_delimiter_outside_a_marker_line(path):
    """nbgrader takes any line holding 'BEGIN SOLUTION' for a marker (00's prose quoted both on one line)."""
    for cell in read(path).cells:
        for line in cell.source.splitlines():
            if "BEGIN SOLUTION" in line or "END SOLUTION" in line:
                assert cell.cell_type == "code", line
                assert line.strip() in ("### BEGIN SOLUTION", "### END SOLUTION"), line


def test_student_edition_keeps_nbgrader_metadata_on_the_answer_box():
    nb = read(ROOT / "notebooks" / "02_cow_split.ipynb")
    student = student_notebook(nb)
    assert grade_cells(student).keys() == grade_cells(nb).keys()
    box = grade_cells(student)["q3"]
    assert box.source.startswith("**Your answer:**") and not is_solution_cell(box)


def test_release_step_drops_widget_state_and_solution_tags():
    pytest.importorskip("nbconvert")
    nb = read(ROOT / "notebooks" / "01_radix_tree.ipynb")
    assert "widgets" in nb.metadata and any(is_solution_cell(c) for c in nb.cells)
    nb, _ = nbgrader_meta.CleanRelease().preprocess(nb, {})
    assert "widgets" not in nb.metadata and not any(is_solution_cell(c) for c in nb.cells)
    assert grade_cells(nb)["q1"].metadata["nbgrader"]["grade"]


# -- the check cell under nbgrader -------------------------------------------------------------------


def blank(node, idx):
    raise NotImplementedError()


def no_ref(node, idx):  # forgets to copy the node's ref onto the suffix: partial credit
    tok = node.key[idx]
    suffix = RadixNode(node.key[idx:], node.value, node.children, ref=1)
    node.key, node.value, node.children = node.key[:idx], None, {tok: suffix}
    return suffix


def reference(node, idx):
    return RadixTree._split(None, node, idx)


def test_check_cell_returns_its_score_under_nbgrader(monkeypatch, capsys):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    friendly = check_split(no_ref, record=False)
    assert isinstance(friendly, CheckResult) and repr(friendly).startswith("❌")
    for mode in ("autograde", "validate"):
        monkeypatch.setenv("NBGRADER_EXECUTION", mode)
        scores = [check_split(f, record=False) for f in (blank, no_ref, reference)]
        assert scores == [0.0, friendly.score, 3.0] and 0 < friendly.score < 3
        assert all(type(s) is float for s in scores)  # its repr is the one number nbgrader reads
        out = capsys.readouterr().out  # the verdicts go to stdout, not stderr (stderr costs all points)
        assert "⏳" in out and "❌" in out and "✅" in out
    assert check_exercise(SPLIT, reference, record=False) == 3.0


# -- nbgrader itself ---------------------------------------------------------------------------------


def _answer_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return grade_cells(nb)["ex02_1_answer"]


WRONG = '''def split(node: RadixNode, idx: int) -> RadixNode:
    tok = node.key[idx]
    suffix = RadixNode(node.key[idx:], node.value, node.children, ref=1)  # forgets the node's ref
    node.key, node.value, node.children = node.key[:idx], None, {tok: suffix}
    return suffix'''


def test_nbgrader_generate_assignment_and_autograde_match_radixlab_grade(tmp_path):
    pytest.importorskip("nbgrader", reason="nbgrader is not installed (`make setup` installs it)")
    from nbgrader.api import Gradebook

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    env.pop("NBGRADER_EXECUTION", None)

    def nbgrader(*args: str) -> None:
        proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "ERROR" not in proc.stderr, proc.stderr[-3000:]

    (tmp_path / "nbgrader_config.py").write_text(
        'c = get_config()\nc.CourseDirectory.course_id = "radixlab"\n'
        "from radixlab.course.nbgrader_meta import configure\nconfigure(c)\n")
    # 1. every notebook releases like the student edition: no solution, no reference answer, no widget state
    (tmp_path / "source" / "all").mkdir(parents=True)
    for path in NOTEBOOKS:
        (tmp_path / "source" / "all" / path.name).write_bytes(path.read_bytes())
    nbgrader("generate_assignment", "all", "--force")
    for path in NOTEBOOKS:
        release = read(tmp_path / "release" / "all" / path.name)
        text = json.dumps(release)
        assert "widgets" not in release.metadata, path.name
        assert "SOLUTION" not in text and "Reference answer" not in text, path.name
        assert all(not c.get("outputs") for c in release.cells), path.name
        assert not any(is_solution_cell(c) for c in release.cells), path.name
    # 2. three submissions of 02 built from its release, only the answer cell changed (the other
    #    notebooks are not handed in: nbgrader scores them 0 without running anything)
    release = read(tmp_path / "release" / "all" / "02_cow_split.ipynb")
    solution = strip_markers(_answer_cell(read(ROOT / "notebooks" / "02_cow_split.ipynb")).source)
    submissions = {}
    for student, source in [("blank", None), ("right", solution), ("wrong", WRONG)]:
        nb = nbformat.from_dict(release)
        if source:
            _answer_cell(nb).source = source
        folder = tmp_path / "submitted" / student / "all"
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / "02_cow_split.ipynb")
        submissions[student] = folder / "02_cow_split.ipynb"
    nbgrader("autograde", "all", "--force")
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        scores = {s: {g.name: g.auto_score
                      for g in gb.find_submission_notebook("02_cow_split", "all", s).grades} for s in submissions}
    # 3. radixlab grade on the very same files
    out = tmp_path / "grades.json"
    proc = subprocess.run([sys.executable, "-m", "radixlab", "grade", *map(str, submissions.values()),
                           "--notebooks", str(ROOT / "notebooks"), "--json", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours = {Path(r["submission"]).parts[-3]: r["auto_points"] for r in json.loads(out.read_text())["reports"]}
    nbgrader_auto = {s: scores[s]["ex02_1_check"] for s in submissions}
    assert nbgrader_auto == ours, (nbgrader_auto, ours)
    assert ours["blank"] == 0 and ours["right"] == 3 and 0 < ours["wrong"] < 3
    assert all(scores[s]["q3"] == 0 for s in submissions)  # the unanswered written question scores 0
