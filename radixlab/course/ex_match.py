"""Exercise 01.1 (notebook 01_radix_tree): write ``match_prefix`` of the teaching radix tree.

The student writes ``match_prefix(root, tokens) -> (hit_len, hit_val)``: walk down from ``root``
while whole edges agree with ``tokens``, remember the last node that holds a value, and stop where
the query ends or differs inside an edge (the seed's semantics, ``RadixTree.match_prefix``).

A case is plain data: the requests inserted into a fresh ``RadixTree`` (request ``i`` gets the
value ``"KV<i>"``) and the queries asked. ``drive`` builds the tree, calls the function on every
query and returns plain data: one ``[hit_len, hit_val]`` per query and whether the tree changed.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Hashable, Sequence

from ..tree import RadixNode, RadixTree
from .ex_tree import plain, render, snapshot
from .spec import ExerciseSpec, GradedCase, check_exercise

MatchFn = Callable[[RadixNode, Sequence[Hashable]], tuple[int, Any]]


def reference_match_prefix(*args: Any) -> Any:
    """The instructor's answer, loaded on demand from ``answers_match`` (absent from the executor process)."""
    from .answers_match import reference_match_prefix as answer
    return answer(*args)


def build_tree(requests: Sequence[Sequence[Hashable]]) -> RadixTree:
    tree = RadixTree()
    for i, tokens in enumerate(requests):
        tree.insert(list(tokens), f"KV{i}")
    return tree


def drive(match_prefix: MatchFn, args: dict) -> dict:
    """Build the tree from ``args["requests"]``, ask every query; plain data out."""
    tree = build_tree(args["requests"])
    before = snapshot(tree.root)
    results = []
    for q in args["queries"]:
        got = match_prefix(tree.root, list(q))
        results.append(plain(list(got)) if isinstance(got, tuple) and len(got) == 2 else ["not a pair", plain(got)])
    after = snapshot(tree.root)
    return {"results": results, "tree_changed": after != before, "tree": render(before)}


def compare(got: dict, want: dict, args: dict) -> str | None:
    if got == want:
        return None
    if got["tree_changed"]:
        return "match_prefix must not change the tree (it only reads it); the tree was:\n" + want["tree"]
    for q, g, w in zip(args["queries"], got["results"], want["results"]):
        if g == w:
            continue
        if g and g[0] == "not a pair":
            return f"match_prefix(root, {q}) must return a pair (hit_len, hit_val), got {g[1]!r}"
        from .answers_match import diagnose  # the grader's (or the check cell's) process, never the executor
        named = diagnose(build_tree(args["requests"]).root, q, g, w)
        hint = f"\n   {named}." if named else ""
        if not named and isinstance(g[0], int) and g[0] < w[0]:
            hint = "\n   Keep walking while whole edges agree, and remember the deepest node that holds a value."
        return (f"match_prefix(root, {q}) returned {tuple(g)}, expected {tuple(w)}.{hint}\n"
                f"The tree (requests {args['requests']}, request i holds 'KV<i>'):\n{want['tree']}")
    return "the result differs from the reference"


A, B, C = ["sys", "prompt", "A"], ["sys", "prompt", "B"], ["sys", "prompt", "C"]


def cases(seed: int = 0) -> list[GradedCase]:
    """The seed's requests (main), and hidden shapes with tokens drawn from ``seed``."""
    rng = random.Random(seed)
    t = rng.sample(range(1, 100), 12) if seed else list(range(1, 13))
    a, b, c = A, B, C
    if seed:  # the grader's seeds rename the seed's tokens: a table of the visible answers scores nothing
        words = rng.sample(["sys", "prompt", "user", "assistant", "hello", "tool", "A", "B", "C", "D", "E", "doc"], 5)
        a, b, c = [words[0], words[1], words[2]], [words[0], words[1], words[3]], [words[0], words[1], words[4]]

    def hidden(name: str, requests: list, queries: list, weight: float = 1.0) -> GradedCase:
        return GradedCase(name, {"requests": requests, "queries": queries}, "boundary", weight)
    return [
        GradedCase("seed: A and B cached; match A, B, C and the shared prefix",
                   {"requests": [a, b], "queries": [a, b, c, a[:2]]}, weight=2),
        GradedCase("only A cached: B diverges inside A's edge", {"requests": [a], "queries": [b, a, a[:1]]}),
        hidden("a query longer than the cached path hits where the path ends", [t[:3]], [t[:5], t[:3] + [t[11]]]),
        hidden("the deepest node *holding a value* counts, not the last node reached",
               [t[:2], t[:4], t[:3] + [t[5]]], [t[:3] + [t[9]], t[:3], t[:4], t[:2] + [t[10]]]),
        hidden("an empty query, and a token no edge starts with (next to a hit)", [t[4:6]],
               [[], [t[7]], [t[5]], t[4:6]]),
        hidden("forks at several depths, values on internal nodes",
               [t[:6], t[:3], t[:3] + t[6:8], [t[0], t[8], t[8]], [t[1], t[1]], t[:6] + [t[6], t[6]]],
               [t[:6] + [t[6]] * 3, t[:4], t[:3] + t[6:8] + [t[0]], t[:3] + [t[6]], [t[0], t[8]], [t[0], t[8], t[8]],
                [t[1]] * 3, [t[1]], [t[2]], t[:6], t[:6] + [t[6]],
                t[:4] + [t[9], t[10]]],  # diverges inside a deeper edge: a whole edge must agree, not its first token
               weight=2),
    ]


SPEC = ExerciseSpec(
    id="01.1", title="match_prefix", function="match_prefix", check="check_match_prefix",
    reference=reference_match_prefix, drive=drive, cases=cases, compare=compare,
    forbidden=("match_prefix", "reference_match_prefix", "find"),
    # absent from the grader's executor: every walk that answers a match (the lead updates these dotted
    # names when modules move)
    strip=("radixlab.tree:RadixTree.match_prefix", "radixlab.tree:RadixTree.find"))
SPECS = [SPEC]


def check_match_prefix(match_prefix: MatchFn, *, record: bool = True) -> Any:
    """Check a student's ``match_prefix(root, tokens)`` against the seed's semantics (exercise 01.1)."""
    return check_exercise(SPEC, match_prefix, record=record)
