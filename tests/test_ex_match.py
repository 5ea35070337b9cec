"""Exercise 01.1 (match_prefix): the notebook's solution passes, a blank and plausible wrong answers fail."""

import json
from pathlib import Path

import nbformat
import pytest

from radixlab.course import ex_match
from radixlab.course.edition import strip_markers
from radixlab.course.ex_match import check_match_prefix
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
    if tokens:
        tree.insert(tokens, "new")  # changes the tree
    return ex_match.reference_match_prefix(root, tokens)


def test_notebook_solution_passes_with_full_marks():
    result = check_match_prefix(notebook_solution(), record=False)
    assert result.passed and result.score == result.max_score == 3
    assert repr(result).startswith("✅ Exercise 01.1 (match_prefix)")


def test_blank_is_not_done():
    result = check_match_prefix(blank, record=False)
    assert result.not_done and result.score == 0
    assert repr(result).startswith("⏳ Exercise 01.1") and "not done yet" in repr(result)


@pytest.mark.parametrize("wrong, says", [
    (counts_partial_edges, "did you count a partial edge"),
    (last_node_reached, "expected"),
    (no_child_check, "KeyError"),
    (splits_while_matching, "must not change the tree"),
])
def test_plausible_wrong_answers_fail_with_a_useful_message(wrong, says):
    result = check_match_prefix(wrong, record=False)
    assert not result.passed and not result.not_done and result.score < result.max_score
    assert repr(result).startswith("❌ Exercise 01.1") and says in repr(result), repr(result)


def test_handing_in_radixlab_own_match_fails():
    result = check_match_prefix(ex_match.reference_match_prefix, record=False)
    assert result.score == 0 and "write your own" in repr(result)


def test_cases_are_plain_data_drawn_from_the_seed():
    for seed in (0, 1, 99):
        for case in ex_match.cases(seed):
            want = ex_match.drive(ex_match.reference_match_prefix, case.args)
            assert json.loads(json.dumps(want)) == want  # plain, JSON-able data both ways
            assert json.loads(json.dumps(case.args)) == case.args
            assert ex_match.drive(notebook_solution(), case.args) == want
    assert ex_match.cases(1) != ex_match.cases(2) and ex_match.cases(0) == ex_match.cases(0)


def test_every_case_reaches_the_blank():
    """No case is answered by the frame alone: the blank fails every one."""
    result = check_match_prefix(blank, record=False)
    assert all(not o.passed for o in result.outcomes) and len(result.outcomes) == len(ex_match.cases(0))


def test_a_wrapper_around_radixlabs_match_scores_nothing_in_the_grader_but_the_solution_does():
    """The grader's copy of radixlab has no RadixTree.match_prefix: a wrapper cannot reach it."""
    from grade_helpers import grade_cells

    wrapper = ("from radixlab.tree import RadixTree\n\ndef match_prefix(root, tokens):\n"
               "    t = RadixTree()\n    t.root = root\n    return t.match_prefix(tokens)\n")
    result, _ = grade_cells("01.1", [wrapper])
    assert result.score == 0 and "has no attribute 'match_prefix'" in repr(result), repr(result)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and "def match_prefix(root, tokens)" in c.source]
    result, _ = grade_cells("01.1", ["from radixlab.tree import common_prefix_len", strip_markers(cell.source)])
    assert result.passed, repr(result)


def test_not_a_function_is_a_clear_error():
    with pytest.raises(TypeError, match="match_prefix"):
        check_match_prefix("def match_prefix(): ...")


HEAD = "def match_prefix(root, tokens):\n"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Exercise 01.1 through the grader (untrusted executor, verdicts in the grader's process)."""
    from radixlab.course import grade
    from radixlab.course.edition import student_notebook

    def with_answer(source):
        nb = nbformat.read(NOTEBOOK, as_version=4)
        next(c for c in nb.cells if c.cell_type == "code" and "def match_prefix(root, tokens)" in c.source).source = source
        return nb

    subs = {
        "good": nbformat.read(NOTEBOOK, as_version=4),
        "blank": student_notebook(nbformat.read(NOTEBOOK, as_version=4)),
        "partial_edges": with_answer("from radixlab.tree import common_prefix_len\n\n" + HEAD +
            "    node, i, hit = root, 0, (0, None)\n"
            "    while i < len(tokens) and tokens[i] in node.children:\n"
            "        child = node.children[tokens[i]]\n"
            "        j = common_prefix_len(child.key, tokens[i:])\n"
            "        i += j\n"
            "        if child.value is not None:\n            hit = (i, child.value)\n"
            "        if j < len(child.key):\n            break\n"
            "        node = child\n"
            "    return hit\n"),
        "wraps_radixlab": with_answer("from radixlab.tree import RadixTree\n\n" + HEAD +
            "    t = RadixTree()\n    t.root = root\n    return t.match_prefix(tokens)\n"),
    }
    folder = tmp_path_factory.mktemp("grade01")
    paths = []
    for name, nb in subs.items():
        paths.append(folder / f"{name}.ipynb")
        nbformat.write(nb, paths[-1])
    out = folder / "grades.json"
    rc = grade.main([str(p) for p in paths] + ["--notebooks", str(NOTEBOOK.parent), "--lesson", "01",
                                               "--seed", "5", "--case-timeout", "5", "--json", str(out)])
    assert rc == 0
    reports = json.loads(out.read_text())["reports"]
    return {name: next(r for r in rep["exercises"] if r["exercise"] == "01.1") for name, rep in zip(subs, reports)}


def test_the_grader_scores_01_1(graded):
    assert (graded["good"]["status"], graded["good"]["points"], graded["good"]["max_points"]) == ("passed", 3, 3)
    assert graded["blank"]["status"] == "not done" and graded["blank"]["points"] == 0
    assert graded["partial_edges"]["points"] < 3
    assert graded["partial_edges"]["status"] == "failed"
    assert graded["wraps_radixlab"]["points"] == 0


def trusts_the_edge(root, tokens):
    """Checks only an edge's first token (the child's dict key), then jumps over the whole edge."""
    node, i, hit = root, 0, (0, None)
    while i < len(tokens) and tokens[i] in node.children:
        child = node.children[tokens[i]]
        i += len(child.key)
        if i > len(tokens):
            break
        if child.value is not None:
            hit = (i, child.value)
        node = child
    return hit


def visible_table(root, tokens):
    """A table of the check cell's visible answers (the seed's tokens), nothing else."""
    table = {("sys", "prompt", "A"): (3, "KV0"), ("sys", "prompt", "B"): (3, "KV1")}
    return table.get(tuple(tokens), (0, None))


@pytest.mark.parametrize("seed", [0, 12345])
def test_an_answer_that_trusts_the_edge_fails_a_hidden_case_too(seed):
    """Divergence inside a deeper edge (not only the first one): it lost only a main case (2.33/3)."""
    from radixlab.course.spec import check_exercise
    r = check_exercise(ex_match.SPEC, trusts_the_edge, seed=seed, record=False)
    assert any(not o.passed and o.part == "boundary" for o in r.outcomes), repr(r)
    assert r.score < 2, repr(r)


def test_the_graders_seeds_rename_the_visible_tokens():
    """A table of the visible answers scored 1.53/3 in the grader; on a grader seed, it passes no main case."""
    from radixlab.course.spec import check_exercise
    for seed in (1, 2, 12345):
        r = check_exercise(ex_match.SPEC, visible_table, seed=seed, record=False)
        assert r.part_score("main") == 0, repr(r)
        assert check_exercise(ex_match.SPEC, notebook_solution(), seed=seed, record=False).passed
