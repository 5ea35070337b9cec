"""Instructor answers of exercises 02.1 and 02.2.

Never imported by a notebook or by the grader's executor process (``runner.py`` refuses the import
there): the grader computes the expected values from it in its own process.
"""

from __future__ import annotations

from ..mem_cache import RadixCache, RadixKey, TreeNode
from ..tree import RadixNode, RadixTree


def reference_split(node: RadixNode, idx: int) -> RadixNode:
    """The instructor's answer: radixlab's own ``RadixTree._split`` (grader side only)."""
    return RadixTree._split(None, node, idx)  # type: ignore[arg-type]


def reference_split_node(cache: RadixCache, key: RadixKey, child: TreeNode, split_len: int) -> TreeNode:
    """Exercise 02.2's answer: radixlab's own ``RadixCache._split_node`` on that cache (grader side only)."""
    return RadixCache._split_node(cache, key, child, split_len)
