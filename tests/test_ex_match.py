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
    (counts_partial_edges, "stopped inside an edge and returned its value"),
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


# -- issue 20: the messages name the misconception; the optional step 01.2 in SGLang's semantics -------


def first_hit(root, tokens):
    """Stops at the first node that holds a value."""
    node, i = root, 0
    while i < len(tokens) and tokens[i] in node.children:
        child = node.children[tokens[i]]
        j = common_prefix_len(child.key, tokens[i:])
        if j < len(child.key):
            break
        i, node = i + j, child
        if child.value is not None:
            return i, child.value
    return 0, None


def nodes_counted(root, tokens):
    """Counts nodes instead of tokens."""
    node, i, depth, hit = root, 0, 0, (0, None)
    while i < len(tokens) and tokens[i] in node.children:
        child = node.children[tokens[i]]
        j = common_prefix_len(child.key, tokens[i:])
        if j < len(child.key):
            break
        i, node, depth = i + j, child, depth + 1
        if child.value is not None:
            hit = (depth, child.value)
    return hit


def wrong_value(root, tokens):
    """The right length, the root's child's value."""
    hit_len, _ = notebook_solution()(root, tokens)
    first = next(iter(root.children.values()), None)
    return hit_len, (None if first is None or hit_len == 0 else ("other", first.value))


@pytest.mark.parametrize("wrong, says", [
    (counts_partial_edges, "your match stopped inside an edge and returned its value"),
    (last_node_reached, "it holds no value (value is None)"),
    (first_hit, "you stopped at the first node holding a value"),
    (trusts_the_edge, "you compared only the first token of an edge"),
    (nodes_counted, "hit_len counts nodes, not tokens"),
    (wrong_value, "the length is right but the value is not"),
    (no_child_check, "KeyError"),
    (splits_while_matching, "must not change the tree"),
])
def test_each_wrong_answer_is_named_by_its_misconception(wrong, says):
    result = check_match_prefix(wrong, record=False)
    assert not result.passed and not result.not_done and result.score < result.max_score
    assert says in repr(result), repr(result)


def test_the_exercise_gives_a_specification_not_pseudo_code():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    i = next(k for k, c in enumerate(nb.cells) if c.source.startswith("## Exercise 01.1"))
    text = nb.cells[i].source
    assert "**Inputs.**" in text and "**Output.**" in text and "**Invariants.**" in text and "| query |" in text
    assert "node, i = root, 0" not in text and "while " not in text
    hints = [c.source for c in nb.cells[i + 1:i + 4]]
    assert all(h.startswith("<details><summary>Hint") for h in hints)
    assert "Hint 1: the idea" in hints[0] and "Hint 2: the structure" in hints[1]


from radixlab.course import ex_match_slots  # noqa: E402
from radixlab.course.ex_match_slots import check_match_slots  # noqa: E402


def notebook_match_slots():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and "def match_slots(" in c.source]
    ns = {}
    exec("from radixlab.mem_cache import RadixKey\n" + strip_markers(cell.source), ns)
    return ns["match_slots"]


def slots_no_split(root, key, split):
    node, slots = root, []
    while len(key) > 0 and (child := node.children.get(key.child_key())) is not None:
        n = child.key.match(key)
        if n < len(child.key):
            break
        slots += child.value.tolist()
        node, key = child, key[n:]
    return slots, node


def slots_last_node_only(root, key, split):
    _, node = notebook_match_slots()(root, key, split)
    return (node.value.tolist() if node.parent is not None else []), node


def slots_whole_partial_edge(root, key, split):
    node, slots = root, []
    while len(key) > 0 and (child := node.children.get(key.child_key())) is not None:
        n = child.key.match(key)
        slots += child.value.tolist()
        if n < len(child.key):
            return slots, child
        node, key = child, key[n:]
    return slots, node


def slots_returns_the_parent(root, key, split):
    node, slots = root, []
    while len(key) > 0 and (child := node.children.get(key.child_key())) is not None:
        n = child.key.match(key)
        if n < len(child.key):
            return slots + split(child, n).value.tolist(), node
        slots += child.value.tolist()
        node, key = child, key[n:]
    return slots, node


def slots_leaf_first(root, key, split):
    _, node = notebook_match_slots()(root, key, split)
    out, walk = [], node
    while walk.parent is not None:
        out += walk.value.tolist()
        walk = walk.parent
    return out, node


def test_01_2_reference_passes_and_blank_is_not_done():
    result = check_match_slots(notebook_match_slots(), record=False)
    assert result.passed and result.score == 3, repr(result)
    assert check_match_slots(lambda root, key, split: (_ for _ in ()).throw(NotImplementedError()), record=False).not_done


@pytest.mark.parametrize("wrong, says", [
    (slots_no_split, "SGLang does not stop at the last boundary: split the edge there"),
    (slots_last_node_only, "concatenate all of them, root to end"),
    (slots_whole_partial_edge, "you counted the slots of an edge that only partly matches"),
    (slots_returns_the_parent, "the hit ends at the node whose edge ends where the hit ends"),
    (slots_leaf_first, "in path order (root first)"),
])
def test_01_2_wrong_answers_are_named(wrong, says):
    result = check_match_slots(wrong, record=False)
    assert not result.passed and not result.not_done and result.score < 3
    assert says in repr(result), repr(result)


def test_01_2_is_marked_optional_in_the_notebook_and_its_cases_rename_tokens():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert any(c.source.startswith("## Exercise 01.2 (optional)") for c in nb.cells)
    assert ex_match_slots.cases(0) == ex_match_slots.cases(0) and ex_match_slots.cases(3) != ex_match_slots.cases(0)
    for seed in (0, 4):
        for case in ex_match_slots.cases(seed):
            want = ex_match_slots.drive(ex_match_slots.reference_match_slots, case.args)
            assert json.loads(json.dumps(want)) == want
