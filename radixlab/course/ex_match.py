"""Exercise 01.1 (notebook 01_radix_tree): write ``match_prefix`` of the teaching radix tree.

The student writes ``match_prefix(root, tokens) -> (hit_len, hit_val)``: walk down from ``root``
while whole edges agree with ``tokens``, remember the last node that holds a value, and stop where
the query ends or differs inside an edge (the seed's semantics, ``RadixTree.match_prefix``).

Every case is plain data: the requests inserted into a fresh ``RadixTree`` (each with the value
``"KV<i>"``) and the queries asked. ``answers`` runs a function on a case and returns plain data
(one ``[hit_len, hit_val]`` pair per query, and the tree's text before and after), so a grader can
run the student's function in one process and compute the expected answers in another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

from ..tree import RadixNode, RadixTree
from .check import Case, CheckResult, own_code, run_check

MatchFn = Callable[[RadixNode, Sequence[Hashable]], tuple[int, Any]]

A, B, C = ["sys", "prompt", "A"], ["sys", "prompt", "B"], ["sys", "prompt", "C"]


@dataclass(frozen=True)
class MatchCase:
    """Requests to insert (values ``KV0``, ``KV1``, ...) and queries to match, all plain lists."""

    name: str
    requests: tuple
    queries: tuple
    hidden: bool = False
    points: float = 1.0


def _branching() -> tuple[tuple, tuple]:
    """A deterministic tree with forks at several depths, values on internal nodes, and queries
    that end on boundaries, inside edges, past leaves and off the tree."""
    requests = ([1, 2, 3, 4, 5, 6], [1, 2, 3], [1, 2, 3, 7, 8], [1, 9, 9], [2, 2], [1, 2, 3, 4, 5, 6, 7, 7])
    queries = ([1, 2, 3, 4, 5, 6, 7, 7, 7], [1, 2, 3, 4], [1, 2, 3, 7, 8, 1], [1, 2, 3, 7], [1, 9],
               [1, 9, 9], [2, 2, 2], [2], [3], [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7])
    return tuple(map(tuple, requests)), tuple(map(tuple, queries))


CASES = (
    MatchCase("seed: A and B cached; match A, B, C and the shared prefix",
              (tuple(A), tuple(B)), (tuple(A), tuple(B), tuple(C), ("sys", "prompt")), points=2),
    MatchCase("only A cached: B diverges inside A's edge", (tuple(A),), (tuple(B), tuple(A), ("sys",))),
    MatchCase("a query longer than the cached path hits where the path ends",
              ((1, 2, 3),), ((1, 2, 3, 4, 5),), hidden=True),
    MatchCase("the last node *holding a value* counts, not the last node reached",
              ((1, 2), (1, 2, 3, 4), (1, 2, 3, 5)), ((1, 2, 3, 9), (1, 2, 3), (1, 2, 3, 4)), hidden=True),
    MatchCase("an empty query, and a token no edge starts with", ((5, 6),), ((), (7,)), hidden=True),
    MatchCase("forks at several depths, values on internal nodes", *_branching(), hidden=True),
)


def build_tree(case: MatchCase) -> RadixTree:
    tree = RadixTree()
    for i, tokens in enumerate(case.requests):
        tree.insert(list(tokens), f"KV{i}")
    return tree


def answers(fn: MatchFn, case: MatchCase) -> dict:
    """Run ``fn`` on every query of ``case``: plain data (the tree's text before and after, and
    one ``[hit_len, hit_val]`` per query)."""
    tree = build_tree(case)
    before = tree.format()
    results = []
    for q in case.queries:
        got = fn(tree.root, list(q))
        if not (isinstance(got, tuple) and len(got) == 2):
            raise AssertionError(f"match_prefix({list(q)}) must return a pair (hit_len, hit_val), got {got!r}")
        results.append([got[0], got[1]])
    return {"tree_before": before, "tree_after": tree.format(), "results": results}


def reference_answers(case: MatchCase) -> dict:
    """The expected plain data, from ``RadixTree.match_prefix``."""
    tree = build_tree(case)
    text = tree.format()
    return {"tree_before": text, "tree_after": text,
            "results": [list(tree.match_prefix(list(q))) for q in case.queries]}


def compare(got: dict, want: dict, case: MatchCase) -> None:
    """Raise AssertionError naming the first query that differs (or a changed tree)."""
    if got["tree_after"] != got["tree_before"]:
        raise AssertionError("match_prefix must not change the tree. Before:\n"
                             f"{got['tree_before']}\nafter:\n{got['tree_after']}")
    for q, g, w in zip(case.queries, got["results"], want["results"]):
        if g != w:
            hint = ""
            if g[0] > w[0]:
                hint = (" (a hit ends at a node holding a value, after a whole edge: did you count a partial"
                        " edge, or a node whose value is None?)")
            elif g[0] < w[0]:
                hint = " (keep walking while whole edges agree; remember the deepest node that holds a value)"
            raise AssertionError(f"match_prefix({list(q)}): expected (hit_len, hit_val) = {tuple(w)}, got {tuple(g)}{hint}\n"
                                 f"tree:\n{want['tree_before']}")


def _case(fn: MatchFn, case: MatchCase) -> Case:
    return Case(case.name, lambda: compare(answers(fn, case), reference_answers(case), case),
                points=case.points, hidden=case.hidden)


def check_match_prefix(match_prefix: MatchFn) -> CheckResult:
    """Check a student's ``match_prefix(root, tokens)`` against the seed's semantics (exercise 01.1)."""
    if not callable(match_prefix):
        raise TypeError(f"match_prefix must be a function match_prefix(root, tokens), got {type(match_prefix).__name__}")
    fn = own_code(match_prefix, "match_prefix", RadixTree.match_prefix)
    return run_check("01.1", "match_prefix", [_case(fn, c) for c in CASES])
