"""Exercise 02.1 (notebook 02_cow_split): implement the copy-on-write split of the teaching tree.

The student writes ``split(node, idx) -> suffix_child`` with the seed's semantics. The check plugs
it into a real ``RadixTree`` in place of ``RadixTree._split`` and compares every resulting tree with
the reference implementation: keys, values, refs, children and later matches.
"""

from __future__ import annotations

from typing import Callable

from ..tree import RadixNode, RadixTree
from .check import Case, CheckResult, expect_equal, own_code, run_check

SplitFn = Callable[[RadixNode, int], RadixNode]


def wrong_order_split(node: RadixNode, idx: int) -> RadixNode:
    """Seed Q3's bug, kept runnable: truncate the key first, then read the split token."""
    suffix_child = RadixNode(node.key[idx:], node.value)
    suffix_child.children = node.children
    suffix_child.ref = node.ref
    node.key = node.key[:idx]       # truncated first...
    split_tok = node.key[idx]       # ...so this index is now past the end: IndexError
    node.value = None
    node.children = {split_tok: suffix_child}
    return suffix_child


def _snapshot(node: RadixNode) -> tuple:
    """A comparable picture of a subtree: (key, value, ref, sorted children)."""
    kids = tuple(sorted(((repr(k), _snapshot(c)) for k, c in node.children.items()), key=lambda kc: kc[0]))
    value = tuple(sorted(node.value.items())) if isinstance(node.value, dict) else node.value
    return (tuple(node.key), value, node.ref, kids)


def _tree_with(split: SplitFn) -> RadixTree:
    tree = RadixTree()
    tree._split = split  # the instance attribute shadows RadixTree._split
    return tree


def _scenario(split: SplitFn | None, requests: list[list]) -> RadixTree:
    tree = RadixTree() if split is None else _tree_with(split)
    for tokens in requests:
        tree.insert(tokens, {i: t for i, t in enumerate(tokens)})
    return tree


def _same_tree(split: SplitFn, requests: list[list], what: str) -> None:
    got = _scenario(split, requests)
    want = _scenario(None, requests)
    if _snapshot(got.root) != _snapshot(want.root):
        raise AssertionError(f"{what}: the tree differs from the expected one.\n"
                             f"expected:\n{want.format()}\ngot:\n{got.format()}")
    for tokens in requests:
        expect_equal(got.match_prefix(tokens), want.match_prefix(tokens), f"{what}: match_prefix({tokens})")


def _direct_split(split: SplitFn) -> None:
    below = RadixNode(["x"], "KV_x", ref=1)
    node = RadixNode(["sys", "prompt", "A"], "KV_A", {"x": below}, ref=2)
    suffix = split(node, 2)
    assert suffix is not None, "split must return the new suffix child"
    expect_equal(node.key, ["sys", "prompt"], "prefix node key after split(node, 2)")
    expect_equal(node.value, None, "prefix node value (internal nodes hold no KV)")
    expect_equal(list(node.children), ["A"], "prefix node children keys (the split token 'A')")
    assert node.children["A"] is suffix, "the prefix node's only child must be the returned suffix"
    expect_equal(suffix.key, ["A"], "suffix key")
    expect_equal(suffix.value, "KV_A", "suffix value (it keeps the KV)")
    expect_equal(suffix.ref, 2, "suffix ref (inherited)")
    assert suffix.children.get("x") is below, "the suffix must inherit the original children"


SEED = [["sys", "prompt", "A"], ["sys", "prompt", "B"]]


def check_split(split: SplitFn) -> CheckResult:
    """Check a student's ``split(node, idx)`` against the seed's semantics (exercise 02.1)."""
    if not callable(split):
        raise TypeError(f"split must be a function split(node, idx), got {type(split).__name__}")
    split = own_code(split, "split", RadixTree._split)
    cases = [
        Case("seed requests A then B", lambda: _same_tree(split, SEED, "A then B"), points=2),
        Case("direct split(node, 2): key, value, children, ref", lambda: _direct_split(split)),
        Case("split at idx=1 of a long edge", lambda: _same_tree(split, [[1, 2, 3, 4, 5], [1, 9]], "idx=1"), hidden=True),
        Case("split just before the last token", lambda: _same_tree(split, [[1, 2, 3, 4, 5], [1, 2, 3, 4, 6]], "idx=len-1"), hidden=True),
        Case("split a node that already has children",
             lambda: _same_tree(split, [[1, 2, 3, 4], [1, 2, 3, 4, 5, 6], [1, 2, 7]], "with children"), hidden=True),
        Case("three-way fork and a prefix that ends on a boundary",
             lambda: _same_tree(split, [[5, 6, 7], [5, 6, 8], [5, 9], [5, 6]], "three-way"), hidden=True),
    ]
    return run_check("02.1", "the copy-on-write split", cases)
