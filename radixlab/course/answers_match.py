"""Instructor answer of exercise 01.1.

Never imported by a notebook or by the grader's executor process (``runner.py`` refuses the import
there): the grader computes the expected values from it in its own process.
"""

from __future__ import annotations

from typing import Any, Hashable, Sequence

from ..tree import RadixNode, RadixTree


def reference_match_prefix(root: RadixNode, tokens: Sequence[Hashable]) -> tuple[int, Any]:
    """The instructor's answer: radixlab's own ``RadixTree.match_prefix`` on that root (grader side only)."""
    tree = RadixTree()
    tree.root = root
    return tree.match_prefix(tokens)
