"""Exercise 02.1 (the split): the solution passes, a blank and plausible wrong answers fail."""

import pytest

from radixlab.course.ex_tree import check_split, wrong_order_split
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
    assert result.passed and result.score == result.max_score == 7
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
