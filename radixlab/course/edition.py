"""Student editions: blanks in place of solutions, outputs cleared, reference answers removed.

The notebooks in ``notebooks/`` are the instructor edition and the single source of truth.
Solution code sits between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` (nbgrader's markers);
reference answers to written questions sit in cells tagged ``solution``.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
SOLUTION_TAG = "solution"
ANSWER_PLACEHOLDER = "**Your answer:** _(write your answer here; name the objects, the state change and the cost or correctness chain)_"


def blank_solutions(source: str, where: str = "cell") -> str:
    """Replace every solution region in ``source`` with a stub at the region's indentation."""
    out: list[str] = []
    inside = False
    for lineno, line in enumerate(source.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            if inside:
                raise ValueError(f"{where}: nested '{BEGIN}' at line {lineno}")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}# YOUR CODE HERE")
            out.append(f"{indent}raise NotImplementedError()")
        elif stripped.startswith(END):
            if not inside:
                raise ValueError(f"{where}: '{END}' without '{BEGIN}' at line {lineno}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{where}: '{BEGIN}' is never closed")
    return "\n".join(out)


def strip_markers(source: str) -> str:
    """The instructor's code without the marker lines (what the solution edition runs)."""
    return "\n".join(l for l in source.splitlines() if not l.strip().startswith((BEGIN, END)))


def student_notebook(nb: nbformat.NotebookNode, where: str = "notebook") -> nbformat.NotebookNode:
    """Return the student edition of one notebook (the input is not modified)."""
    nb = nbformat.from_dict(nb)  # deep copy
    cells = []
    for i, cell in enumerate(nb.cells):
        if is_solution_cell(cell):
            # the answer box keeps nbgrader's metadata (a manually graded answer), not the tag or text
            keep = {k: cell.metadata[k] for k in ("nbgrader",) if k in cell.metadata}
            cells.append(nbformat.v4.new_markdown_cell(ANSWER_PLACEHOLDER, metadata=keep))
            continue
        if cell.cell_type == "code":
            cell.source = blank_solutions(cell.source, f"{where} cell {i}")
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
        cells.append(cell)
    nb.cells = cells
    # Notebook-level widget state holds the instructor's widget outputs (SVG trees, progress bars).
    nb.metadata.pop("widgets", None)
    return nb


def make_student_edition(src: str | Path, out: str | Path) -> list[Path]:
    """Write the student edition of every ``*.ipynb`` under ``src`` into ``out``; returns the files."""
    src, out = Path(src).resolve(), Path(out).resolve()
    if not src.exists():
        raise FileNotFoundError(f"src does not exist: {src}")
    files = [src] if src.is_file() else sorted(src.glob("*.ipynb"))
    if not files:
        raise ValueError(f"src holds no notebooks: {src}")
    if out in {p.parent for p in files} or _holds_instructor_notebooks(out):
        raise ValueError(f"out must not be an instructor notebooks directory ({out}): "
                         "refusing to overwrite solutions")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in files:
        nb = nbformat.read(path, as_version=4)
        student = student_notebook(nb, path.name)
        target = out / path.name
        nbformat.write(student, target)
        written.append(target)
    return written


def _holds_instructor_notebooks(folder: Path) -> bool:
    """True when ``folder`` already holds a notebook with solutions in it."""
    for path in folder.glob("*.ipynb") if folder.is_dir() else []:
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception:
            continue
        for cell in nb.cells:
            if is_solution_cell(cell) or has_solution_markers(cell.source):
                return True
    return False


def has_solution_markers(source: str) -> bool:
    return bool(re.search(r"^\s*" + re.escape(BEGIN), source, re.M))


def is_solution_cell(cell: dict) -> bool:
    """A reference-answer cell (tagged ``solution``): removed from the student edition."""
    return SOLUTION_TAG in cell.get("metadata", {}).get("tags", [])
