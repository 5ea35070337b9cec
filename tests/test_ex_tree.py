"""Exercise 02.1 (the split): the solution passes, a blank and plausible wrong answers fail."""

import pytest

from radixlab.course.ex_tree import check_split, wrong_order_split
from radixlab.course import ex_tree
from radixlab.tree import RadixNode, RadixTree


def reference(node, idx):
    return RadixTree._split(None, node, idx)


def blank(node, idx):
    raise NotImplementedError()


def forgets_children(node, idx):
    tok = node.key[idx]
    suffix = RadixNode(node.key[idx:], node.value, ref=node.ref)
    node.key, node.value, node.children = node.key[:idx], None, {tok: suffix}
    return suffix


def does_not_inherit_ref(node, idx):
    tok = node.key[idx]
    suffix = RadixNode(node.key[idx:], node.value, node.children, ref=1)
    node.key, node.value, node.children = node.key[:idx], None, {tok: suffix}
    return suffix


def keeps_value_on_prefix(node, idx):
    tok = node.key[idx]
    suffix = RadixNode(node.key[idx:], node.value, node.children, ref=node.ref)
    node.key, node.children = node.key[:idx], {tok: suffix}
    return suffix


def test_reference_passes():
    result = check_split(reference)
    assert result.passed and result.score == result.max_score == 3
    assert repr(result).startswith("✅ Exercise 02.1 (the copy-on-write split)")


def test_blank_is_not_done_yet():
    result = check_split(blank)
    assert not result.passed and result.not_done and result.score == 0
    assert repr(result).startswith("⏳ Exercise 02.1") and "not done yet" in repr(result)


@pytest.mark.parametrize("wrong", [wrong_order_split, forgets_children, does_not_inherit_ref, keeps_value_on_prefix])
def test_plausible_wrong_answers_fail(wrong):
    result = check_split(wrong)
    assert not result.passed and not result.not_done and result.score < result.max_score
    assert repr(result).startswith("❌ Exercise 02.1")


def test_wrong_order_split_raises_index_error_and_names_it():
    assert "IndexError" in repr(check_split(wrong_order_split))


def test_check_rejects_non_function():
    with pytest.raises(TypeError, match="split"):
        check_split(42)


def test_handing_in_radixlab_own_split_fails():
    result = check_split(RadixTree._split)
    assert result.score == 0 and "write your own" in repr(result)


def keys_child_by_wrong_token(node, idx):
    suffix = RadixNode(node.key[idx:], node.value, node.children, ref=node.ref)
    node.key, node.value, node.children = node.key[:idx], None, {node.key[idx - 1]: suffix}
    return suffix


def test_a_tree_that_prints_the_same_is_told_apart_by_its_child_keys():
    """The seed's text form hides child keys; the message shows them and where the trees differ."""
    text = repr(check_split(keys_child_by_wrong_token))
    assert "children keyed" in text and "└─ [" in text


def test_a_hanging_case_is_named_and_does_not_hang_the_check_cell():
    def hangs_at_idx_1(node, idx):
        while idx == 1:
            pass
        return reference(node, idx)

    import time
    t0 = time.perf_counter()
    result = ex_tree.check_exercise(ex_tree.SPEC, hangs_at_idx_1, time_limit=0.5, record=False)
    assert time.perf_counter() - t0 < 10
    timed = [o.name for o in result.outcomes if o.outcome == "timeout"]
    assert "split at idx=1 of a long edge" in timed and "timed out after 0.5 s" in repr(result)
    assert 0 < result.score < 3


def test_not_implemented_in_one_branch_is_partial_credit():
    def half(node, idx):
        if node.children:
            raise NotImplementedError()
        return reference(node, idx)

    result = check_split(half, record=False)
    assert not result.not_done and 0 < result.score < 3
    assert "not implemented" in repr(result)


def test_grader_cases_are_drawn_from_the_seed_and_stay_valid():
    for seed in (0, 1, 99):
        cases = ex_tree.cases(seed)
        wants = [ex_tree.drive(ex_tree.reference_split, c.args) for c in cases]
        assert all(w for w in wants)
    assert ex_tree.cases(1) != ex_tree.cases(2) and ex_tree.cases(0) == ex_tree.cases(0)


# -- issue 20: named mistakes, a specification instead of steps, and SGLang's direction (02.2) ---------

from pathlib import Path  # noqa: E402

import nbformat  # noqa: E402

from radixlab.course.edition import strip_markers  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "02_cow_split.ipynb"


def suffix_without_value(node, idx):
    tok = node.key[idx]
    suffix = RadixNode(node.key[idx:], None, node.children, ref=node.ref)
    node.key, node.value, node.children = node.key[:idx], None, {tok: suffix}
    return suffix


def sglang_direction(node, idx):
    prefix = RadixNode(node.key[:idx], None, {node.key[idx]: node}, ref=node.ref)
    node.key = node.key[idx:]
    return prefix


def old_children_beside(node, idx):
    tok = node.key[idx]
    suffix = RadixNode(node.key[idx:], node.value, node.children, ref=node.ref)
    node.key, node.value = node.key[:idx], None
    node.children = {**node.children, tok: suffix}
    return suffix


@pytest.mark.parametrize("wrong, says", [
    (forgets_children, "the suffix child must take over the node's children"),
    (does_not_inherit_ref, "the suffix child inherits the node's ref"),
    (keeps_value_on_prefix, "the prefix node keeps no value after the split"),
    (suffix_without_value, "the suffix child takes over the node's value"),
    (keys_child_by_wrong_token, "must sit under the split token"),
    (sglang_direction, "SGLang's _split_node does the opposite"),
    (old_children_beside, "exactly one child, the suffix"),
    (wrong_order_split, "IndexError"),
])
def test_02_1_each_wrong_answer_is_named(wrong, says):
    result = check_split(wrong, record=False)
    assert not result.passed and not result.not_done and result.score < 3
    assert says in repr(result), repr(result)


def test_02_1_gives_a_specification_not_the_steps():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    i = next(k for k, c in enumerate(nb.cells) if c.source.startswith("## Exercise 02.1"))
    text = nb.cells[i].source
    assert "**After the call**" in text and "**Worked example.**" in text
    assert "1. save the split token" not in text and "4. give it exactly one child" not in text
    assert nb.cells[i + 1].source.startswith("<details><summary>Hint 1: the idea")


from radixlab.course import ex_split_node  # noqa: E402
from radixlab.course.ex_split_node import check_split_node  # noqa: E402


def notebook_split_node():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and "def split_node(" in c.source]
    ns = {}
    exec("from radixlab import RadixCache, RadixKey\n" + strip_markers(cell.source), ns)
    return ns["split_node"]


def split_node_with(**mistake):
    """The notebook's split_node with one plausible mistake."""
    def split_node(cache, key, child, n):
        parent = child.parent
        cut = (lambda t: t) if mistake.get("view") else (lambda t: t.clone())
        new = cache._new_node(child.key[:n], cut(child.value[:n]), parent, child.priority)
        new.lock_ref = 0 if mistake.get("no_lock") else child.lock_ref
        new.hit_count = 0 if mistake.get("no_hits") else child.hit_count
        new.last_access_time = child.last_access_time
        child.key, child.value = child.key[n:], cut(child.value[n:])
        if not mistake.get("no_child_parent"):
            child.parent = new
        filed = key.child_key(cache.page_size) if mistake.get("wrong_key") else child.key.child_key(cache.page_size)
        new.children[filed] = child
        if not mistake.get("no_repoint"):
            parent.children[key.child_key(cache.page_size)] = new
        return child if mistake.get("returns_child") else new
    return split_node


def new_node_holds_suffix(cache, key, child, n):
    """The teaching tree's direction on TreeNodes: the original keeps the prefix."""
    new = cache._new_node(child.key[n:], child.value[n:].clone(), child, child.priority)
    new.lock_ref, new.hit_count, new.last_access_time = child.lock_ref, child.hit_count, child.last_access_time
    new.children = child.children
    for grandchild in new.children.values():
        grandchild.parent = new
    child.key, child.value = child.key[:n], child.value[:n].clone()
    child.children = {new.key.child_key(cache.page_size): new}
    return child


def test_02_2_reference_passes_blank_is_not_done():
    result = check_split_node(notebook_split_node(), record=False)
    assert result.passed and result.score == 3, repr(result)
    assert check_split_node(lambda *a: (_ for _ in ()).throw(NotImplementedError()), record=False).not_done


@pytest.mark.parametrize("wrong, says", [
    (split_node_with(no_repoint=True), "re-point the parent at the new node"),
    (split_node_with(no_lock=True), "copy the child's lock_ref"),
    (split_node_with(view=True), "a view of the old index tensor"),
    (new_node_holds_suffix, "your new node holds the suffix"),
    (split_node_with(no_child_parent=True), "parent must now be the new node"),
    (split_node_with(wrong_key=True), "files its child under the wrong key"),
    (split_node_with(no_hits=True), "inherits the child's hit_count"),
    (split_node_with(returns_child=True), "return the *new* node"),
])
def test_02_2_each_wrong_answer_is_named(wrong, says):
    result = check_split_node(wrong, record=False)
    assert not result.passed and not result.not_done and result.score < 3
    assert says in repr(result), repr(result)


def test_02_2_cases_are_plain_and_renamed_on_grader_seeds():
    assert ex_split_node.cases(0) == ex_split_node.cases(0) and ex_split_node.cases(5) != ex_split_node.cases(0)
    import json
    for seed in (0, 5):
        for case in ex_split_node.cases(seed):
            want = ex_split_node.drive(ex_split_node.reference_split_node, case.args)
            assert json.loads(json.dumps(want)) == want
            assert want["calls"], case.name  # every case reaches the student's split


def test_handing_in_radixlabs_own_split_node_fails():
    from radixlab.mem_cache import RadixCache
    result = check_split_node(RadixCache._split_node, record=False)
    assert result.score == 0 and "write your own" in repr(result)
