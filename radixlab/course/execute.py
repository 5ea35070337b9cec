"""Execute notebooks in place (``make execute-notebooks``): how the stored outputs are produced.

Runs each notebook top to bottom in a fresh kernel, from the notebook's own folder, and fails on
the first error, so an executed notebook in the repo never holds an error output. The kernel imports
the same ``radixlab`` as this process (its folder goes first on ``PYTHONPATH``), so a second checkout
(a git worktree) executes its own package, not the one installed in editable mode elsewhere.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute_notebook(path: str | Path, timeout: int = 600, allow_errors: bool = False) -> nbformat.NotebookNode:
    """Execute ``path`` and return the executed notebook (not written)."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    os.environ.setdefault("RADIXLAB_DEVICE", "cpu")
    root = str(Path(__file__).resolve().parents[2])  # the folder holding this radixlab package
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([root] + ([before] if before else []))
    try:
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                                resources={"metadata": {"path": str(path.parent.resolve())}})
        client.execute()
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before
    return nb


def main(argv: list[str] | None = None) -> int:
    paths = argv if argv is not None else sys.argv[1:]
    usage = "usage: python -m radixlab.course.execute NOTEBOOK.ipynb [...]  (executes each in place, fresh kernel)"
    if any(p in ("-h", "--help") for p in paths):
        print(usage)
        return 0
    if not paths:
        print(usage, file=sys.stderr)
        return 2
    for p in paths:
        if p.startswith("-"):
            print(f"unknown option {p!r}\n{usage}", file=sys.stderr)
            return 2
        if not Path(p).is_file():
            print(f"no such notebook: {p}\n{usage}", file=sys.stderr)
            return 2
    for p in paths:
        t0 = time.perf_counter()
        nb = execute_notebook(p)
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
        nbformat.write(nb, p)
        print(f"executed {p} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
