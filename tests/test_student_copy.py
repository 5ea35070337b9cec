"""A student's own copy of the course (``make lab``'s ``my-course/``) survives every later build.

The student edition writes only the notebooks a folder lacks (``--force`` overwrites), ``make student``
and ``make lab`` build the copy without touching a learner's edits, ``make clean`` leaves it alone, git
ignores it, and the rubric's written questions keep their reference answers out of it. The Makefile
tests run make in a scratch copy of the repository with a stand-in virtual environment whose stamp is
up to date, so no ``make setup`` runs and no JupyterLab starts (``JUPYTER=echo``).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from radixlab.__main__ import main as cli
from radixlab.course.edition import ANSWER_PLACEHOLDER, is_solution_cell, make_student_edition, student_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SMALL = [ROOT / "notebooks" / n for n in ("00_welcome.ipynb", "02_cow_split.ipynb")]
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _edit(path: Path, text: str = "my answer: the fork token") -> bytes:
    """A learner's edit: a new code cell at the end; returns the file's bytes after the edit."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(text))
    nbformat.write(nb, path)
    return path.read_bytes()


def _instructor_copy(tmp_path: Path, paths=SMALL) -> Path:
    src = tmp_path / "notebooks"
    src.mkdir()
    for p in paths:
        shutil.copy(p, src / p.name)
    return src


# -- the student edition never overwrites a notebook that is there ----------------------------------


def test_fresh_folder_gets_every_notebook_and_a_partial_one_only_the_missing(tmp_path):
    src, out = _instructor_copy(tmp_path), tmp_path / "my-course"
    assert [p.name for p in make_student_edition(src, out)] == [p.name for p in SMALL]
    mine = _edit(out / "02_cow_split.ipynb")
    (out / "00_welcome.ipynb").unlink()
    assert [p.name for p in make_student_edition(src, out)] == ["00_welcome.ipynb"]
    assert (out / "02_cow_split.ipynb").read_bytes() == mine
    assert make_student_edition(src, out) == []  # nothing missing: nothing written
    assert (out / "02_cow_split.ipynb").read_bytes() == mine


def test_a_notebook_the_course_gains_later_is_added_and_the_rest_left_alone(tmp_path):
    src, out = _instructor_copy(tmp_path, SMALL[:1]), tmp_path / "my-course"
    make_student_edition(src, out)
    mine = _edit(out / "00_welcome.ipynb")
    shutil.copy(SMALL[1], src / SMALL[1].name)  # `git pull` brings a new notebook
    assert [p.name for p in make_student_edition(src, out)] == [SMALL[1].name]
    assert (out / "00_welcome.ipynb").read_bytes() == mine


def test_force_overwrites_and_still_refuses_a_folder_with_solutions(tmp_path):
    src, out = _instructor_copy(tmp_path), tmp_path / "out"
    make_student_edition(src, out)
    _edit(out / "02_cow_split.ipynb")
    assert len(make_student_edition(src, out, force=True)) == 2
    assert "my answer" not in (out / "02_cow_split.ipynb").read_text()
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(SMALL[1], copy / SMALL[1].name)  # an instructor notebook, solutions and all
    before = (copy / SMALL[1].name).read_bytes()
    with pytest.raises(ValueError, match="out must not be an instructor notebooks directory"):
        make_student_edition(src, copy, force=True)
    assert (copy / SMALL[1].name).read_bytes() == before


def test_a_pasted_reference_answer_in_the_students_copy_does_not_block_the_next_build(tmp_path):
    """Comparing with the instructor notebook, a student may paste its cell (tags and markers) into the copy."""
    src, out = _instructor_copy(tmp_path), tmp_path / "my-course"
    make_student_edition(src, out)
    inst = nbformat.read(SMALL[1], as_version=4)
    nb = nbformat.read(out / SMALL[1].name, as_version=4)
    nb.cells += [c for c in inst.cells if is_solution_cell(c)]
    nbformat.write(nb, out / SMALL[1].name)
    (out / "00_welcome.ipynb").unlink()
    assert [p.name for p in make_student_edition(src, out)] == ["00_welcome.ipynb"]


def test_bad_out_and_src_are_refused_clearly(tmp_path):
    src = _instructor_copy(tmp_path)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="out must be a folder"):
        make_student_edition(src, tmp_path / "afile")
    with pytest.raises(ValueError, match="out must not be an instructor notebooks directory"):
        make_student_edition(src, src)  # even without --force
    with pytest.raises(FileNotFoundError, match="src does not exist"):
        make_student_edition(tmp_path / "missing", tmp_path / "out")


def test_cli_says_what_it_kept_and_how_to_overwrite(tmp_path, capsys):
    src, out = _instructor_copy(tmp_path), tmp_path / "my-course"
    assert cli(["student", str(src), "-o", str(out)]) == 0
    assert capsys.readouterr().out.count("wrote ") == 2
    mine = _edit(out / "02_cow_split.ipynb")
    (out / "00_welcome.ipynb").unlink()
    assert cli(["student", str(src), "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert "wrote " in said and "00_welcome.ipynb" in said
    assert re.search(r"kept 1 notebook\(s\) already in .*\(02_cow_split\.ipynb\): not overwritten", said), said
    assert "--force" in said and (out / "02_cow_split.ipynb").read_bytes() == mine
    assert cli(["student", str(src), "-o", str(out)]) == 0
    assert "kept 2 notebook(s)" in capsys.readouterr().out and (out / "02_cow_split.ipynb").read_bytes() == mine
    assert cli(["student", str(src), "-o", str(out), "--force"]) == 0
    assert "my answer" not in (out / "02_cow_split.ipynb").read_text()
    assert cli(["student", str(src), "-o", str(src)]) == 2
    assert "out must not be" in capsys.readouterr().err


# -- the rubric's written questions keep their reference answers out of the student copy ------------


def _phrases(reference: str) -> list[str]:
    """The reference answer's sentences (markdown emphasis dropped), long enough to be its own words."""
    plain = re.sub(r"[*_`]", "", reference)
    return [s.strip() for s in re.split(r"(?<=[.;:!?])\s+|\n", plain) if len(s.strip()) >= 30]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_written_questions_keep_their_reference_answers_out_of_the_student_copy(path):
    from radixlab.course.grade import load_lesson

    questions = load_lesson(path).questions
    inst = nbformat.read(path, as_version=4)
    assert len(questions) == sum(map(is_solution_cell, inst.cells))
    student = student_notebook(inst, path.name)
    everything = [c.source for c in student.cells] + [json.dumps(c.metadata) for c in student.cells]
    plain = re.sub(r"[*_`]", "", "\n".join(everything + [json.dumps(student.metadata)]))
    sources = [c.source.strip() for c in student.cells]
    for q in questions:
        phrases = _phrases(q.reference)
        assert phrases, (q.label, q.reference)
        leaked = [s for s in phrases if s in plain]
        assert not leaked, f"{path.name} {q.label}: reference answer in the student copy: {leaked[:2]}"
        at = sources.index(q.text)  # the question stays, and an empty answer box follows it
        assert sources[at + 1] == ANSWER_PLACEHOLDER, (q.label, sources[at + 1][:80])
        assert not is_solution_cell(student.cells[at + 1])


def test_the_course_has_written_questions_to_protect():
    from radixlab.course.grade import load_lesson

    assert sum(len(load_lesson(p).questions) for p in NOTEBOOKS) >= 6


# -- make: the student's copy survives `make student`, `make lab`'s build step and `make clean` -----


@pytest.fixture
def repo(tmp_path):
    """A scratch repository: the Makefile, a few instructor notebooks, and a stand-in venv already set up."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, root / name)
    _instructor_copy(root)
    venv = root / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    (venv / ".radixlab-installed").touch()
    earlier = time.time() - 86400  # the stamp is newer than pyproject.toml: make sees the venv as set up
    os.utime(root / "pyproject.toml", (earlier, earlier))
    return root


def make(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(["make", "-C", str(repo), *args], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pip install" not in proc.stdout and "fetch-model" not in proc.stdout, "make setup must not run"
    return proc


@needs_make
def test_make_student_builds_the_copy_once_and_keeps_a_learners_edit(repo):
    make(repo, "student")
    copy = repo / "my-course"
    assert sorted(p.name for p in copy.glob("*.ipynb")) == [p.name for p in SMALL]
    assert "BEGIN SOLUTION" not in (copy / "02_cow_split.ipynb").read_text()
    mine = _edit(copy / "02_cow_split.ipynb")
    out = make(repo, "student").stdout
    assert "kept 2 notebook(s)" in out and (copy / "02_cow_split.ipynb").read_bytes() == mine
    (repo / "build" / "handout").mkdir(parents=True)
    (repo / ".hypothesis").mkdir()
    make(repo, "clean")
    assert not (repo / "build").exists() and not (repo / ".hypothesis").exists()
    assert (copy / "02_cow_split.ipynb").read_bytes() == mine, "make clean deleted the student's work"


@needs_make
def test_make_clean_keeps_build_student_where_the_copy_used_to_be(repo):
    """Before my-course/, `make student` wrote build/student/, and learners worked there."""
    old = repo / "build" / "student"
    old.mkdir(parents=True)
    (old / "01_radix_tree.ipynb").write_text("{}")  # a learner's work, from before
    (repo / "build" / "screenshots").mkdir()
    out = make(repo, "clean").stdout
    assert (old / "01_radix_tree.ipynb").read_text() == "{}"
    assert not (repo / "build" / "screenshots").exists()
    assert "kept build/student/" in out and "my-course/" in out


@needs_make
def test_make_lab_builds_the_copy_then_opens_it_without_touching_an_edit(repo):
    # `-o setup`: the stand-in venv is set up already; JUPYTER=echo prints the command instead of a server.
    out = make(repo, "-o", "setup", "lab", "JUPYTER=echo jupyter").stdout
    copy = repo / "my-course"
    assert (copy / "00_welcome.ipynb").exists()
    assert re.search(r"^jupyter lab --ServerApp.root_dir=\. --ContentsManager.preferred_dir=my-course", out, re.M), out
    mine = _edit(copy / "00_welcome.ipynb")
    make(repo, "-o", "setup", "lab", "JUPYTER=echo jupyter")
    assert (copy / "00_welcome.ipynb").read_bytes() == mine
    out = make(repo, "-o", "setup", "lab-instructor", "JUPYTER=echo jupyter").stdout
    assert re.search(r"^jupyter lab notebooks/", out, re.M), out


@needs_make
def test_make_handout_is_the_instructors_and_leaves_the_students_copy_alone(repo):
    make(repo, "student")
    mine = _edit(repo / "my-course" / "00_welcome.ipynb")
    make(repo, "handout")
    _edit(repo / "build" / "handout" / "00_welcome.ipynb", "scratch")
    make(repo, "handout")  # regenerated: build/ is generated output
    assert "scratch" not in (repo / "build" / "handout" / "00_welcome.ipynb").read_text()
    assert (repo / "my-course" / "00_welcome.ipynb").read_bytes() == mine


def test_git_ignores_the_students_copy():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    proc = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "my-course/00_welcome.ipynb"])
    assert proc.returncode == 0, "my-course/ must be in .gitignore"
    proc = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "notebooks/00_welcome.ipynb"])
    assert proc.returncode == 1


# -- where a student is told about it ---------------------------------------------------------------


def test_readme_says_which_command_is_whose_near_the_top():
    readme = (ROOT / "README.md").read_text()
    top = readme[readme.index("## Two commands"):][:1500]
    assert "make lab" in top and "my-course/" in top and "make lab-instructor" in top


def test_welcome_notebook_says_how_to_compare_with_the_reference_answers():
    nb = nbformat.read(ROOT / "notebooks" / "00_welcome.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "my-course/" in text and "notebooks/" in text and "same name" in text


def test_binder_fetches_the_model_and_builds_the_students_copy():
    post = ROOT / "postBuild"
    assert post.exists() and os.access(post, os.X_OK), "Binder runs an executable postBuild"
    body = post.read_text()
    assert "python -m radixlab fetch-model" in body
    assert "python -m radixlab student notebooks -o my-course" in body
    assert not (ROOT / "binder").exists() and not (ROOT / ".binder").exists(), (
        "a binder/ folder makes repo2docker ignore the root environment.yml and postBuild")


def test_readme_has_the_colab_cells():
    readme = (ROOT / "README.md").read_text()
    for cell in ("!git clone", "!pip install", "!python -m radixlab fetch-model"):
        assert cell in readme, cell
    assert re.search(r"^!python -m radixlab student \S*notebooks -o \S*my-course$", readme, re.M)
