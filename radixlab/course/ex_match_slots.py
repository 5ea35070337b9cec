"""Exercise 01.2, optional (notebook 01_radix_tree): the match in SGLang's semantics, on radixlab's cache.

The student writes ``match_slots(root, key, split) -> (slots, last_node)`` over ``RadixCache``'s
``TreeNode``s: every node holds the KV slots of *its own* edge, so the hit is the concatenation of the
slots of every node on the path, and it ends at the last node; where the query ends or differs
inside an edge, ``split(child, n)`` (given) cuts the edge so that a node ends exactly there, and the
hit ends at that new node (``RadixCache._match_prefix_helper`` in SGLang's terms, without the clock).
``drive`` hangs a cache (the notebook's requests, slot values chosen apart from the token ids) that
``tree_of`` built where the cases are drawn, calls the function per query and returns plain data:
slots, the last node's id and path, the tree. The executor's copy of radixlab holds no walk that
answers the match: not ``match_prefix``, not the insert (it walks and splits the same way), so
``split``'s closure, or ``gc``, leads to a cache that can only split.
"""

from __future__ import annotations

import random
from typing import Any, Callable

import torch

from ..mem_cache import RadixCache, RadixKey, TreeNode
from .ex_split_node import rows
from .spec import CheckResult, ExerciseSpec, GradedCase, check_exercise

MatchSlotsFn = Callable[[TreeNode, RadixKey, Callable[[TreeNode, int], TreeNode]], tuple]


def reference_match_slots(*args: Any) -> Any:
    """The instructor's answer, loaded on demand from ``answers_match`` (absent from the executor process)."""
    from .answers_match import reference_match_slots as answer
    return answer(*args)


def path_of(node: Any) -> list[int]:
    """The tokens from the root to ``node`` (read through ``parent``, at most 200 steps)."""
    out: list[int] = []
    for _ in range(200):
        if node is None or getattr(node, "parent", None) is None:
            return out
        out = list(node.key.token_ids) + out
        node = node.parent
    return out


def tree_of(requests: list[list[int]], extra_key: str | None = None) -> list[list]:
    """The cache ``requests`` leave (request i's token at slot 100*(i+1)+its position), as
    ``[parent's index, tokens, slots]`` rows, parents first (index 0 is the root). Built where the
    cases are drawn (the grader, the check cell): the executor's copy of radixlab has no insert."""
    cache = RadixCache(1)
    for i, tokens in enumerate(requests):
        cache.insert(RadixKey(tokens, extra_key), torch.arange(100 * (i + 1), 100 * (i + 1) + len(tokens)))
    out, index, queue = [], {cache.root_node.id: 0}, [cache.root_node]
    for node in queue:
        for child in node.children.values():
            index[child.id] = len(out) + 1
            out.append([index[node.id], list(child.key.token_ids), child.value.tolist()])
            queue.append(child)
    return out


def drive(match_slots: MatchSlotsFn, args: dict) -> dict:
    """Hang the case's cache (``tree_of``) node by node, ask every query; plain data out."""
    ns = args.get("extra_key")
    cache = RadixCache(1)
    nodes = [cache.root_node]
    for parent, tokens, slots in args["tree"]:  # no walk here: the tree comes as it is
        key = RadixKey(tokens, ns)
        nodes.append(cache._add_leaf(nodes[parent], key.child_key(1), key, torch.tensor(slots, dtype=torch.int64),
                                     0, False))

    def split(child: TreeNode, n: int) -> TreeNode:
        return cache._split_node(child.key, child, n)
    results = []
    for q in args["queries"]:
        got = match_slots(cache.root_node, RadixKey(q, ns), split)
        if not (isinstance(got, tuple) and len(got) == 2):
            results.append(["not a pair", repr(got)[:100]])
            continue
        slots, last = got
        slots = slots.tolist() if isinstance(slots, torch.Tensor) else slots
        slots = [int(s) for s in slots] if isinstance(slots, (list, tuple)) else repr(slots)[:100]
        last_id = last.id if isinstance(last, TreeNode) else repr(last)[:100]
        results.append([slots, last_id, path_of(last) if isinstance(last, TreeNode) else None])
    return {"results": results, "tree": [r[:4] for r in rows(cache)]}


def compare(got: dict, want: dict, args: dict) -> str | None:
    if got == want:
        return None
    for q, g, w in zip(args["queries"], got["results"], want["results"]):
        if g == w:
            continue
        if g[0] == "not a pair":
            return f"match_slots(root, key {q}, split) must return a pair (slots, last_node), got {g[1]}"
        slots, last_id, path = g
        where = f"match_slots(root, key {q}, split) returned slots {slots} ending at node path {path}"
        expect = f"expected {w[0]} ending at {w[2]}"
        if not isinstance(last_id, int):
            return f"{where}: the second item must be the TreeNode where the hit ends, got {last_id}"
        if isinstance(slots, list) and len(slots) < len(w[0]):
            if w[0][:len(slots)] == slots and path == w[2][:len(path)] and len(slots) == len(path):
                return (f"{where}; {expect}: the query goes on inside the next edge. SGLang does not stop at the last "
                        "boundary: split the edge there, split(child, n), and add the new node's slots")
            return (f"{where}; {expect}: every node on the path holds the slots of its own edge; "
                    "concatenate all of them, root to end, not only the last node's")
        if isinstance(slots, list) and len(slots) == len(w[0]) and slots != w[0]:
            return f"{where}; {expect}: the slots are a node's value tensor, in path order (root first)"
        if slots == w[0] and path != w[2]:
            return (f"{where}; {expect}: the hit ends at the node whose edge ends where the hit ends "
                    "(after a split, the new node split returned)")
        if isinstance(slots, list) and len(slots) > len(w[0]):
            return (f"{where}; {expect}: you counted the slots of an edge that only partly matches: "
                    "take its first n slots through split(child, n), never the whole edge")
        return f"{where}; {expect}"
    if got["tree"] != want["tree"]:
        return ("the tree after your matches differs from the reference: split only where the query ends or differs "
                "inside an edge, and change nothing else")
    return "the result differs from the reference"


def cases(seed: int = 0) -> list[GradedCase]:
    """The notebook's A, B, C (main), and hidden shapes drawn from ``seed``."""
    rng = random.Random(seed)
    t = rng.sample(range(1, 99), 10) if seed else list(range(1, 11))
    a, b, c = [t[0], t[1], t[2]], [t[0], t[1], t[3]], [t[0], t[1], t[4]]
    def case(name: str, requests: list, queries: list, part: str = "main", weight: float = 1.0,
             extra_key: str | None = None) -> GradedCase:
        args = {"requests": requests, "queries": queries, "tree": tree_of(requests, extra_key)}
        return GradedCase(name, {**args, "extra_key": extra_key} if extra_key else args, part, weight)
    return [
        case("A and B cached: match A, C and the shared prefix", [a, b], [a, c, a[:2]], weight=2),
        case("only A cached: B ends inside A's edge (a split)", [a], [b, a]),
        case("a query past the cached path, an empty query, an unknown first token", [t[:3]], [t[:5], [], [t[9]]],
             "boundary"),
        case("a deep path: slots of every node, root first, then a split two levels down",
             [t[:6], t[:2], t[:4] + [t[8]]], [t[:6], t[:5] + [t[9]], t[:3]], "boundary"),
        case("a namespace (extra_key) on every key", [t[:4]], [t[:2], t[:4]], "boundary", extra_key="lora-7"),
    ]


SPEC = ExerciseSpec(
    id="01.2", optional=True, title="match_slots, SGLang's semantics (optional)", function="match_slots", check="check_match_slots",
    reference=reference_match_slots, drive=drive, cases=cases, compare=compare,
    forbidden=("match_prefix", "_match_prefix_helper", "reference_match_slots"),
    # absent from the grader's executor: every walk that answers a match in SGLang's semantics, and the
    # insert walk (it walks and splits just as a match does; the drive hangs the case's tree without it)
    strip=("radixlab.mem_cache.radix_cache:RadixCache.match_prefix",
           "radixlab.mem_cache.radix_cache:RadixCache.insert", "radixlab.mem_cache.radix_cache:RadixCache._insert",
           "radixlab.mem_cache.radix_cache:RadixCache._insert_helper",
           "radixlab.mem_cache.fast_radix_cache:FastRadixCache._insert_helper",
           "radixlab.course.ex_match_slots:tree_of",
           "radixlab.mem_cache.radix_cache:RadixCache._match_prefix_helper",
           # the interface's abstract match_prefix too: left alone, RadixCache without it could not be built
           "radixlab.mem_cache.base_prefix_cache:BasePrefixCache.match_prefix",
           "radixlab.mem_cache.fast_radix_cache:FastRadixCache._match_prefix_helper"))
SPECS = [SPEC]


def check_match_slots(match_slots: MatchSlotsFn, *, record: bool = True) -> CheckResult:
    """Check a student's ``match_slots(root, key, split)`` in SGLang's semantics (optional exercise 01.2)."""
    return check_exercise(SPEC, match_slots, record=record)
