"""Notebook 07's exercise: the instructor's gather passes 07.1, the student edition's blank fails it;
and the notebook links SGLang at v0.5.17 with line numbers (tests/test_sglang_links.py checks each line)."""

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



def test_notebook_write_side_passes_and_blank_fails():
    """Exercise 07.2 (the write side): the notebook's answer passes, its student edition is "not done yet"."""
    import torch

    from radixlab.course.ex_kvwrite import check_write_new_kv

    nb = nbformat.read(NOTEBOOK, as_version=4)
    source = next(c.source for c in nb.cells if c.cell_type == "code" and "def write_new_kv" in c.source)
    scope: dict = {"torch": torch}
    exec(strip_markers(source), scope)
    assert check_write_new_kv(scope["write_new_kv"], record=False).passed
    scope = {"torch": torch}
    exec(blank_solutions(source), scope)
    result = check_write_new_kv(scope["write_new_kv"], record=False)
    assert not result.passed and "not done yet" in repr(result) and "07.2" in repr(result)
