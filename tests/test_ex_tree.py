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
