"""nbgrader's cell metadata on the course notebooks, derived from the course itself (idempotent).

``python -m radixlab.course.nbgrader_meta notebooks/*.ipynb`` writes, and rewrites after any edit:

* an answer cell (``### BEGIN SOLUTION`` ... ``### END SOLUTION``): an nbgrader solution cell;
* its check cell (``check_*(...)`` of a registered exercise): a locked autograded test worth the
  rubric's automatic points (main + boundary; ``rubric.py``, or the notebook's override). Under
  nbgrader the check returns its score, which nbgrader takes as partial credit (``spec.py``);
* a reference answer (a markdown cell tagged ``solution``): a manually graded answer worth a written
  question's points, or the exercise's mapping point for a follow-up worth 0 in ``radixlab grade`` (0 points for
  an optional exercise's follow-up: it counts in no total there either).

Only metadata changes (no source, no output), so the notebooks need no re-execution. ``--check``
exits 1 when a notebook's metadata is stale. ``configure(c)`` is the nbgrader_config.py half: a
release like the student edition (no widget state, no ``solution`` tag, the course's answer box).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import nbformat

from .edition import ANSWER_PLACEHOLDER, SOLUTION_TAG, has_solution_markers, is_solution_cell
from .exercises import all_specs, by_check
from .rubric import RUBRIC, auto_points

SCHEMA_VERSION = 3  # nbgrader 0.9's cell metadata schema
CHECK_CALL = re.compile(r"(?<!def )\b(check_\w+)\s*\(")
KEY = "nbgrader"


def _meta(grade_id: str, *, grade: bool, solution: bool, locked: bool, points: float | None = None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": SCHEMA_VERSION,
            "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return meta


def _exercise_of_check(source: str) -> str | None:
    """The exercise id whose check this code cell calls, if any."""
    for name in CHECK_CALL.findall(source):
        spec = by_check(name)
        if spec is not None and not spec.optional:  # an optional exercise is no nbgrader test
            return spec.id
    return None


def _slug(exercise_id: str) -> str:
    return "ex" + exercise_id.replace(".", "_")


def cell_metadata(nb: nbformat.NotebookNode) -> list[dict | None]:
    """nbgrader's metadata for every cell of ``nb`` (None: not an nbgrader cell)."""
    rubric = {**RUBRIC, **nb.metadata.get("radixlab", {}).get("rubric", {})}
    cells = nb.cells
    out: list[dict | None] = [None] * len(cells)
    used: set[str] = set()

    def unique(grade_id: str) -> str:
        base, k = grade_id, 2
        while grade_id in used:
            grade_id, k = f"{base}_{k}", k + 1
        used.add(grade_id)
        return grade_id

    for i, cell in enumerate(cells):
        if cell.cell_type == "code" and (ex := _exercise_of_check(cell.source)):
            out[i] = _meta(unique(f"{_slug(ex)}_check"), grade=True, solution=False, locked=True,
                           points=auto_points(rubric))
    for i, cell in enumerate(cells):
        if cell.cell_type == "code" and has_solution_markers(cell.source):
            # 1. the answer cell belongs to the first check cell after it
            ex = next((_exercise_of_check(c.source) for c in cells[i + 1:]
                       if c.cell_type == "code" and _exercise_of_check(c.source)), None)
            name = f"{_slug(ex)}_answer" if ex else f"answer_{cell.get('id', i)}"
            out[i] = _meta(unique(name), grade=False, solution=True, locked=False)
        elif is_solution_cell(cell):
            # 2. a written answer: a seed question, or an exercise's follow-up (its mapping point)
            prompt = cells[i - 1].source if i > 0 else ""
            points = cell.metadata.get("radixlab", {}).get("points")
            ex = re.search(r"exercise (\d\d\.\d+)", prompt)
            label = re.search(r"\bQ(\d+)\b", prompt)
            optional = bool(ex) and getattr(all_specs().get(ex.group(1)), "optional", False)
            if points == 0 and ex:
                # an optional exercise counts in no total: its follow-up is marked, for 0 points (as in `grade`)
                name, points = f"{_slug(ex.group(1))}_mapping", 0.0 if optional else rubric["mapping"]
            else:
                name = (f"q{label.group(1)}" if label else f"{_slug(ex.group(1))}_followup" if ex
                        else f"written_{cell.get('id', i)}")
                points = rubric["question"] if points is None else points
            out[i] = _meta(unique(name), grade=True, solution=True, locked=False, points=points)
    return out


def apply(nb: nbformat.NotebookNode) -> bool:
    """Set nbgrader's metadata on ``nb`` in place (and drop stale ones); True if anything changed."""
    changed = False
    for cell, meta in zip(nb.cells, cell_metadata(nb)):
        if meta is None:
            changed |= cell.metadata.pop(KEY, None) is not None
        elif cell.metadata.get(KEY) != meta:
            cell.metadata[KEY] = meta
            changed = True
    return changed


def update_files(paths: list[Path], check: bool = False) -> list[Path]:
    """Update (or, with ``check``, only look at) each notebook; the paths whose metadata was stale."""
    stale = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if apply(nb):
            stale.append(path)
            if not check:
                nbformat.write(nb, path)
    return stale


# -- nbgrader_config.py: `from radixlab.course.nbgrader_meta import configure; configure(c)` --------


def configure(c: Any) -> None:
    """Course settings for nbgrader: a release like the student edition (no widget state, no solution
    tag, the course's answer box as nbgrader's text stub)."""
    from nbgrader.converters.generate_assignment import GenerateAssignment
    from nbgrader.preprocessors import ClearOutput

    steps = list(GenerateAssignment.class_traits()["preprocessors"].default())
    steps.insert(steps.index(ClearOutput) + 1, CleanRelease)
    c.GenerateAssignment.preprocessors = steps
    c.ClearSolutions.text_stub = ANSWER_PLACEHOLDER


def _clean_release(nb: nbformat.NotebookNode, resources: dict) -> tuple:
    nb.metadata.pop("widgets", None)  # the instructor's widget views (ClearOutput leaves them)
    for cell in nb.cells:  # the answer box is the student's now, as in the student edition
        tags = cell.metadata.get("tags")
        if tags and SOLUTION_TAG in tags:
            tags.remove(SOLUTION_TAG)
            if not tags:
                del cell.metadata["tags"]
    return nb, resources


try:  # nbconvert comes with nbgrader and JupyterLab; the metadata tool above does not need it
    from nbconvert.preprocessors import Preprocessor
    from traitlets import Bool

    class CleanRelease(Preprocessor):
        """nbgrader release step: drop the stored widget state and the answer boxes' ``solution`` tag."""

        enabled = Bool(True)  # nbconvert's preprocessors are off unless enabled; nbgrader's steps are on

        def preprocess(self, nb: nbformat.NotebookNode, resources: dict) -> tuple:
            return _clean_release(nb, resources)
except ImportError:  # pragma: no cover
    CleanRelease = None  # type: ignore[assignment,misc]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m radixlab.course.nbgrader_meta",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="only report stale notebooks (exit 1 if any)")
    args = parser.parse_args(argv)
    missing = [p for p in args.notebooks if not p.is_file()]
    if missing:
        parser.error(f"notebooks: no such file: {missing[0]}")
    stale = update_files(args.notebooks, check=args.check)
    for path in stale:
        print(f"{'stale' if args.check else 'updated'}: {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
