"""Notebook 07's exercise: the instructor's gather passes 07.1, the student edition's blank fails it;
and the notebook lists the course's SGLang links with line numbers."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from radixlab.course.edition import blank_solutions, strip_markers
from radixlab.course.ex_kvpool import check_gather_kv

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "07_kv_memory_pool.ipynb"


def _gather_source() -> str:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    return next(c.source for c in nb.cells if c.cell_type == "code" and "def gather_kv" in c.source)


def test_notebook_solution_passes_and_blank_fails():
    scope: dict = {}
    exec(strip_markers(_gather_source()), scope)
    assert check_gather_kv(scope["gather_kv"], record=False).passed
    scope = {}
    exec(blank_solutions(_gather_source()), scope)
    result = check_gather_kv(scope["gather_kv"], record=False)
    assert not result.passed and "07.1" in repr(result)


def test_sglang_links_are_pinned_with_line_numbers():
    text = "\n".join(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "markdown")
    links = re.findall(r"https://github\.com/sgl-project/sglang/blob/([^/]+)/python/sglang/(\S+?)#L(\d+)\)", text)
    assert len(links) >= 15 and {tag for tag, _, _ in links} == {"v0.5.17"}


SGLANG_SRC = Path("/work/ext/sglang/sglang")


def test_linked_lines_name_what_the_notebook_says():
    """Where the pinned source is unpacked (the authors' machine), every link lands on a line that
    defines or does what its link text names."""
    import pytest

    if not SGLANG_SRC.is_dir():
        pytest.skip("SGLang v0.5.17 source not unpacked here")
    text = "\n".join(c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "markdown")
    for label, path, line in re.findall(r"\[([^\]]+)\]\(https://github\.com/sgl-project/sglang/blob/v0\.5\.17/"
                                        r"python/sglang/(\S+?)#L(\d+)\)", text):
        lines = (SGLANG_SRC / path).read_text().splitlines()
        target = lines[int(line) - 1]
        names = [n for n in re.findall(r"`([A-Za-z_][\w.]*)`", label) if not n.endswith(".py")]
        name = names[-1].split(".")[-1] if names else None
        if name:
            assert re.search(rf"\b(class|def) {name}\b", target), f"{path}#L{line} is {target!r}, not {name}"
        else:
            assert target.strip(), f"{path}#L{line} is blank"
