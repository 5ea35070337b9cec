"""Instructor answers of exercises 01.1 and 01.2, and the diagnosis of 01.1's wrong answers.

Never imported by a notebook or by the grader's executor process (``runner.py`` refuses the import
there): the grader computes the expected values from it in its own process.
"""

from __future__ import annotations

from typing import Any, Hashable, Sequence

from ..tree import RadixNode, RadixTree, common_prefix_len


def reference_match_prefix(root: RadixNode, tokens: Sequence[Hashable]) -> tuple[int, Any]:
    """The instructor's answer: radixlab's own ``RadixTree.match_prefix`` on that root (grader side only)."""
    tree = RadixTree()
    tree.root = root
    return tree.match_prefix(tokens)


def reference_match_slots(root: Any, key: Any, split: Any) -> tuple[list[int], Any]:
    """Exercise 01.2's answer: SGLang's walk over ``TreeNode``s, every node's own slots concatenated."""
    node, slots = root, []
    while len(key) > 0 and (child := node.children.get(key.child_key())) is not None:
        n = child.key.match(key)
        if n < len(child.key):  # the hit ends inside this edge: a node must end exactly there
            new_node = split(child, n)
            return slots + new_node.value.tolist(), new_node
        slots += child.value.tolist()
        node, key = child, key[n:]
    return slots, node


# -- what a wrong answer did: the check's messages name the misconception (grader side only) -----------


def _walk(root: RadixNode, tokens: Sequence[Hashable], *, whole_edge: bool = True) -> tuple[list, Any]:
    """The nodes whose whole edge the query covers, as (tokens so far, node), and the edge where the
    walk stopped inside (``(tokens so far, agreed, child)``) or None. ``whole_edge=False``: trust an
    edge once its first token agrees (the dict key), as an answer that never compares the rest does."""
    node, i, path = root, 0, []
    while i < len(tokens) and tokens[i] in node.children:
        child = node.children[tokens[i]]
        j = common_prefix_len(child.key, tokens[i:])
        if not whole_edge and i + len(child.key) <= len(tokens):
            j = len(child.key)
        if j < len(child.key):
            return path, (i, j, child)
        i += j
        path.append((i, child))
        node = child
    return path, None


MISCONCEPTIONS = (
    ("partial edge", "your match stopped inside an edge and returned its value: the query ends or differs inside "
     "that edge, so no node ends there and its value (the KV of the whole edge) is not a hit"),
    ("valueless node", "you returned the deepest node the walk reached, but it holds no value (value is None): "
     "only a node where a request ended is a hit; remember the deepest node that holds a value"),
    ("first hit", "you stopped at the first node holding a value: keep walking while whole edges agree, a deeper "
     "node may hold a longer hit"),
    ("first token only", "you compared only the first token of an edge (the child's dict key) and jumped over the "
     "whole edge: every token of the edge must agree with the query"),
    ("nodes counted", "hit_len counts nodes, not tokens: add the length of each edge you walk"),
    ("wrong value", "the length is right but the value is not that of the node where the hit ends"),
)


def diagnose(root: RadixNode, tokens: Sequence[Hashable], got: list, want: list) -> str:
    """The misconception whose answer equals ``got`` on this query, in words ('' if none fits)."""
    tokens = list(tokens)
    path, inside = _walk(root, tokens)
    guesses = {}
    if inside is not None and inside[2].value is not None:
        i, j, child = inside
        guesses["partial edge"] = [i + j, plain(child.value)]
    if path and path[-1][1].value is None:
        guesses["valueless node"] = [path[-1][0], None]
    valued = [(i, n) for i, n in path if n.value is not None]
    if len(valued) > 1:
        guesses["first hit"] = [valued[0][0], plain(valued[0][1].value)]
    loose, _ = _walk(root, tokens, whole_edge=False)
    loose_valued = [(i, n) for i, n in loose if n.value is not None]
    if loose_valued:
        guesses["first token only"] = [loose_valued[-1][0], plain(loose_valued[-1][1].value)]
    if valued:
        guesses["nodes counted"] = [path.index(valued[-1]) + 1, plain(valued[-1][1].value)]
    for name, message in MISCONCEPTIONS:
        if name in guesses and guesses[name] == got and guesses[name] != want:
            return message
    if isinstance(got, list) and len(got) == 2 and got[0] == want[0] and got[1] != want[1]:
        return dict(MISCONCEPTIONS)["wrong value"]
    return ""


def plain(x: Any) -> Any:
    """A value as the drive reports it (JSON-able)."""
    from .ex_tree import plain as to_plain
    return to_plain(x)
