"""Exercise 02.1 (notebook 02_cow_split): implement the copy-on-write split of the teaching tree.

The student writes ``split(node, idx) -> suffix_child`` with the seed's semantics. ``drive`` plugs it
into a real ``RadixTree`` in place of ``RadixTree._split``, replays requests, and returns the
resulting tree as plain data (keys, values, refs, children *with their child keys*) plus later
matches; the check cell and the grader compare that with the same replay run on the reference.
"""

from __future__ import annotations

import random
from typing import Any, Callable

from ..tree import RadixNode, RadixTree
from .spec import ExerciseSpec, GradedCase, check_exercise

SplitFn = Callable[[RadixNode, int], RadixNode]


def reference_split(*args: Any) -> Any:
    """The instructor's answer, loaded on demand from ``answers_tree`` (absent from the executor process)."""
    from .answers_tree import reference_split as answer
    return answer(*args)


def wrong_order_split(node: RadixNode, idx: int) -> RadixNode:
    """Q3's bug (the tree lesson), kept runnable: the key is truncated before the split token is read.

    The read always fails (the truncated key is exactly ``idx`` long), so nothing after it would run:
    the node is left half-changed, key truncated, value and children where they were.
    """
    node.key = node.key[:idx]       # truncated first...
    split_tok = node.key[idx]       # ...so this index is now past the end: IndexError
    raise AssertionError(f"unreachable: read {split_tok!r} past the end of a key of length {idx}")


# -- plain data: what a split did -------------------------------------------------------------------


def plain(x: Any, depth: int = 0) -> Any:
    """JSON-able copy of a token, key or value (dicts become sorted [k, v] pairs)."""
    if depth > 20:
        return "…"
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, (list, tuple)):
        return [plain(v, depth + 1) for v in x]
    if isinstance(x, dict):
        return sorted(([plain(k, depth + 1), plain(v, depth + 1)] for k, v in x.items()), key=repr)
    return repr(x)


def snapshot(node: Any, depth: int = 0) -> dict:
    """A subtree as plain data, read attribute by attribute (never through methods)."""
    if depth > 50:
        raise RecursionError("the tree is deeper than 50 levels: a cycle?")
    children = getattr(node, "children", None)
    kids = sorted(((repr(k), snapshot(c, depth + 1)) for k, c in dict(children or {}).items()), key=lambda kc: kc[0])
    return {"key": plain(list(getattr(node, "key", []))), "value": plain(getattr(node, "value", None)),
            "ref": plain(getattr(node, "ref", None)), "children": [[k, c] for k, c in kids]}


def render(snap: dict, name: str = "root") -> str:
    """The tree as text *with child keys*, so that two trees that differ anywhere read differently."""
    lines = [name]

    def walk(s: dict, depth: int) -> None:
        for k, c in s["children"]:
            marker = "None" if c["value"] is None else "<kv>"
            lines.append("   " * depth + f"└─ [{k}] key={c['key']!r}  ref={c['ref']}  value={marker}")
            walk(c, depth + 1)
    walk(snap, 0)
    return "\n".join(lines)


def first_difference(got: dict, want: dict, path: str = "root") -> str:
    """Where two snapshots first differ, in words."""
    for field in ("key", "value", "ref"):
        if got[field] != want[field]:
            return f"at {path}: {field} is {got[field]!r}, expected {want[field]!r}"
    gk, wk = [k for k, _ in got["children"]], [k for k, _ in want["children"]]
    if gk != wk:
        return f"at {path}: children keyed {gk}, expected {wk}"
    for (k, g), (_, w) in zip(got["children"], want["children"]):
        found = first_difference(g, w, f"{path} → child {k}")
        if found:
            return found
    return ""


def drive(split: SplitFn, args: dict) -> dict:
    """Run one case with ``split``: a replay through ``RadixTree`` or a direct call; plain data out."""
    if args["kind"] == "direct":
        key, idx, x = args.get("key", DIRECT_KEY), args.get("idx", 2), args.get("below", "x")
        below = RadixNode([x], f"KV_{x}", ref=1)
        node = RadixNode(list(key), f"KV_{key[-1]}", {x: below}, ref=2)
        suffix = split(node, idx)
        return {"returned": None if suffix is None else snapshot(suffix), "node": snapshot(node),
                "child_A_is_returned": suffix is not None and dict(node.children or {}).get(key[idx]) is suffix,
                "keeps_original_children": suffix is not None and dict(getattr(suffix, "children", {}) or {}).get(x) is below}
    tree = RadixTree()
    tree._split = split  # the instance attribute shadows RadixTree._split
    for tokens in args["requests"]:
        tree.insert(tokens, {i: t for i, t in enumerate(tokens)})
    return {"tree": snapshot(tree.root), "matches": [plain(tree.match_prefix(t)) for t in args["requests"]]}


MISTAKES = {
    "children": "the suffix child must take over the node's children (the same child objects): everything below "
                "the cut now hangs below the suffix",
    "ref": "the suffix child inherits the node's ref: every path that went through the old node goes on through it",
    "prefix value": "the prefix node keeps no value after the split (value=None: in the teaching tree only the node "
                    "where a request ended holds KV); the value moves to the suffix child",
    "suffix value": "the suffix child takes over the node's value (the KV of the whole old prefix)",
    "fork token": "the prefix node's only child must sit under the split token, node.key[idx], read before the key "
                  "is truncated",
    "direction": "the teaching tree's split keeps the prefix in the original node and returns a new suffix child "
                 "(SGLang's _split_node does the opposite: that is exercise 02.2)",
    "one child": "after the split the prefix node has exactly one child, the suffix; its old children now hang "
                 "below the suffix, not beside it",
    "key": "the node keeps node.key[:idx], the suffix child gets node.key[idx:]",
}


def name_mistake(where: str) -> str:
    """The misconception behind a ``first_difference`` text, in words ('' when none is known)."""
    if "children keyed" in where:
        import ast
        got_keys, want_keys = (ast.literal_eval(part.strip()) for part in
                               where.split("children keyed", 1)[1].split(", expected"))
        if not got_keys:
            return MISTAKES["children"]
        if set(want_keys) < set(got_keys):
            return MISTAKES["one child"]
        return MISTAKES["fork token"]
    if ": ref is" in where:
        return MISTAKES["ref"]
    if ": value is" in where:
        return MISTAKES["suffix value"] if "is None" in where.split(": value")[1] else MISTAKES["prefix value"]
    if ": key is" in where:
        return MISTAKES["key"]
    return ""


def compare(got: dict, want: dict, args: dict) -> str | None:
    if got == want:
        return None
    if args["kind"] == "direct":
        if got["returned"] is None:
            return "split must return the new suffix child, got None"
        key, idx = args.get("key", DIRECT_KEY), args.get("idx", 2)
        head = f"split(node, {idx}) on key {list(key)}"
        if got["node"]["key"] == want["returned"]["key"] or got["returned"]["key"] == want["node"]["key"]:
            return f"{head}: {MISTAKES['direction']}"
        if want["returned"]["children"] and not got["returned"]["children"] and not got["keeps_original_children"]:
            return f"{head}: {MISTAKES['children']}"
        for what, field in (("the prefix node (the node you split)", "node"), ("the returned suffix child", "returned")):
            where = first_difference(got[field], want[field], "it")
            if where:
                named = name_mistake(where)
                return f"{head}: {what} differs {where}" + (f".\n   {named}" if named else "")
        if not got["child_A_is_returned"]:
            return f"{head}: the prefix node's only child, under the split token {key[idx]!r}, must be the returned suffix"
        return f"{head}: {MISTAKES['children']}"
    replay = " then ".join(str(r) for r in args["requests"])
    where = first_difference(got["tree"], want["tree"])
    if where:
        named = name_mistake(where)
        return (f"inserting {replay}: the tree differs {where}." + (f"\n   {named}." if named else "") +
                f"\nexpected:\n{render(want['tree'])}\ngot:\n{render(got['tree'])}")
    for tokens, g, w in zip(args["requests"], got["matches"], want["matches"]):
        if g != w:
            return f"inserting {replay}: match_prefix({tokens}) returned {g!r}, expected {w!r}"
    return "the result differs from the reference"


SEED = [["sys", "prompt", "A"], ["sys", "prompt", "B"]]
DIRECT_KEY = ["sys", "prompt", "A"]
WORDS = ["sys", "prompt", "user", "assistant", "hello", "tool", "A", "B", "C", "D", "doc", "x", "y", "q"]


def cases(seed: int = 0) -> list[GradedCase]:
    """The seed's replay and a direct call (main), four hidden shapes with tokens drawn from ``seed``."""
    rng = random.Random(seed)
    t = rng.sample(range(1, 100), 9) if seed else list(range(1, 10))

    seed_requests, direct = SEED, {"kind": "direct"}
    if seed:  # the grader's seeds rename the visible tokens: a table of the visible answers scores nothing
        w = rng.sample(WORDS, 8)
        seed_requests = [[w[0], w[1], w[2]], [w[0], w[1], w[3]]]
        key = w[4:4 + rng.randint(3, 4)]
        direct = {"kind": "direct", "key": key, "idx": 2, "below": w[-1]}  # idx 2, as the notebook's

    def replay(name: str, requests: list[list[int]], weight: float = 1.0) -> GradedCase:
        return GradedCase(name, {"kind": "tree", "requests": requests}, "boundary", weight)
    return [
        GradedCase("seed requests A then B", {"kind": "tree", "requests": seed_requests}, weight=2),
        GradedCase("direct split(node, 2): key, value, children, ref", direct),
        replay("split at idx=1 of a long edge", [t[:5], [t[0], t[8]]]),
        replay("split just before the last token", [t[:5], t[:4] + [t[5]]]),
        replay("split a node that already has children", [t[:4], t[:6], [t[0], t[1], t[6]]]),
        replay("three-way fork and a prefix that ends on a boundary",
               [[t[4], t[5], t[6]], [t[4], t[5], t[7]], [t[4], t[8]], [t[4], t[5]]]),
    ]


SPEC = ExerciseSpec(
    id="02.1", title="the copy-on-write split", function="split", check="check_split",
    reference=reference_split, drive=drive, cases=cases, compare=compare,
    forbidden=("_split", "reference_split"),
    strip=("radixlab.tree:RadixTree._split", "radixlab.course.ex_tree:wrong_order_split"))  # absent in the executor
SPECS = [SPEC]


def check_split(split: SplitFn, *, record: bool = True) -> Any:
    """Check a student's ``split(node, idx)`` against the seed's semantics (exercise 02.1)."""
    return check_exercise(SPEC, split, record=record)
