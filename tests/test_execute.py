"""``radixlab.course.execute`` runs a notebook's kernel on the radixlab it was started from.

A second checkout (a git worktree) must execute its notebooks with its own package, not with the one
installed in editable mode from another folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

import radixlab


def test_the_kernel_imports_the_radixlab_the_executor_was_started_from(tmp_path):
    copy = tmp_path / "checkout"
    shutil.copytree(Path(radixlab.__file__).parent, copy / "radixlab", ignore=shutil.ignore_patterns("__pycache__"))
    notebooks = copy / "notebooks"
    notebooks.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import radixlab; print(radixlab.__file__)")])
    nbformat.write(nb, notebooks / "where.ipynb")
    done = subprocess.run([sys.executable, "-m", "radixlab.course.execute", "notebooks/where.ipynb"], cwd=copy,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = nbformat.read(notebooks / "where.ipynb", as_version=4).cells[0].outputs[0]["text"].strip()
    assert Path(printed).resolve().is_relative_to(copy.resolve()), printed  # not the editable install's


def test_help_and_bad_paths_are_answered_not_executed(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "radixlab.course.execute", *a], cwd=tmp_path,
                                    capture_output=True, text=True, timeout=60)
    shown = run("--help")
    assert shown.returncode == 0 and "usage:" in shown.stdout
    missing = run("nope.ipynb")
    assert missing.returncode == 2 and "no such notebook: nope.ipynb" in missing.stderr
    unknown = run("--fast")
    assert unknown.returncode == 2 and "unknown option '--fast'" in unknown.stderr
