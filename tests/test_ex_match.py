"""Exercise 01.1 (match_prefix): the notebook's solution passes, a blank and plausible wrong answers fail."""

from pathlib import Path

import nbformat
import pytest

from radixlab.course.edition import strip_markers
from radixlab.course.ex_match import CASES, answers, check_match_prefix, reference_answers
from radixlab.tree import RadixTree, common_prefix_len

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "01_radix_tree.ipynb"


def notebook_solution():
    """The instructor's ``match_prefix`` from notebook 01, markers stripped."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and "def match_prefix(root, tokens)" in c.source]
    namespace = {}
    exec(strip_markers(cell.source), namespace)
    return namespace["match_prefix"]


def blank(root, tokens):
    raise NotImplementedError()


def counts_partial_edges(root, tokens):
    node, i, hit = root, 0, (0, None)
    while i < len(tokens) and tokens[i] in node.children:
        child = node.children[tokens[i]]
        j = common_prefix_len(child.key, tokens[i:])
        i += j
        if child.value is not None:
            hit = (i, child.value)
        if j < len(child.key):
            break
        node = child
    return hit


def last_node_reached(root, tokens):
    node, i = root, 0
    while i < len(tokens) and tokens[i] in node.children:
        child = node.children[tokens[i]]
        j = common_prefix_len(child.key, tokens[i:])
        if j < len(child.key):
            break
        i, node = i + j, child
    return i, node.value


def no_child_check(root, tokens):
    node, i, hit = root, 0, (0, None)
    while i < len(tokens):
        child = node.children[tokens[i]]  # KeyError off the tree
        j = common_prefix_len(child.key, tokens[i:])
        if j < len(child.key):
            break
        i += j
        if child.value is not None:
            hit = (i, child.value)
        node = child
    return hit


def splits_while_matching(root, tokens):
    tree = RadixTree()
    tree.root = root
    tree.insert(tokens, "new")  # changes the tree
    return RadixTree.match_prefix(tree, tokens)


def test_notebook_solution_passes_with_full_marks():
    result = check_match_prefix(notebook_solution())
    assert result.passed and result.score == result.max_score == 7
    assert repr(result).startswith("✅ Exercise 01.1 (match_prefix)")


def test_blank_is_not_done():
    result = check_match_prefix(blank)
    assert result.not_done and result.score == 0
    assert repr(result).startswith("⏳ Exercise 01.1")


@pytest.mark.parametrize("wrong, says", [
    (counts_partial_edges, "did you count a partial edge"),
    (last_node_reached, "expected (hit_len, hit_val)"),
    (no_child_check, "raised KeyError"),
    (splits_while_matching, "must not change the tree"),
    (RadixTree.match_prefix, "write your own"),
])
def test_plausible_wrong_answers_fail_with_a_useful_message(wrong, says):
    result = check_match_prefix(wrong)
    assert not result.passed and result.score < result.max_score
    assert repr(result).startswith("❌ Exercise 01.1") and says in repr(result)


def test_cases_are_plain_data_and_the_reference_agrees_with_itself():
    ref = notebook_solution()
    for case in CASES:
        got, want = answers(ref, case), reference_answers(case)
        assert got == want
        assert all(isinstance(r, list) and isinstance(r[0], int) for r in got["results"])
        assert all(isinstance(v, (tuple, str)) for v in (case.requests, case.queries, case.name))


def test_not_a_function_is_a_clear_error():
    with pytest.raises(TypeError, match="match_prefix must be a function"):
        check_match_prefix("def match_prefix(): ...")
