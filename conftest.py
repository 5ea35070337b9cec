"""Shared pytest set-up: nbval does not compare SVG (dot output differs across Graphviz versions)."""

import os
from pathlib import Path

os.environ.setdefault("RADIXLAB_DEVICE", "cpu")
ROOT = str(Path(__file__).resolve().parent)


def pytest_collectstart(collector):
    if collector.fspath and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("image/svg+xml", "application/vnd.jupyter.widget-view+json")
        # nbval's kernels import this checkout's radixlab, not the editable install of another
        # checkout (a git worktree), as `python -m radixlab.course.execute` does.
        parts = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if ROOT not in parts:
            os.environ["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in parts if p])
