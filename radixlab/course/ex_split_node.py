"""Exercise 02.2, optional (notebook 02_cow_split, "Going further"): SGLang's split,
``RadixCache._split_node``, on radixlab's cache.

The student writes ``split_node(cache, key, child, split_len) -> new_node`` in SGLang's direction: a
new node for the *prefix*, the original ``child`` keeps the suffix, the parent re-pointed, ``lock_ref``
(and priority, hit count, access time) copied, both index tensors cloned. ``drive`` builds a real
``RadixCache`` without any split (paths inserted parents first), puts the function in place of
``_split_node``, runs inserts and matches that split (with a live request's lock on a deep node) and
returns what happened as plain data, read attribute by attribute.
"""

from __future__ import annotations

import random
from typing import Any, Callable

import torch

from ..mem_cache import RadixCache, RadixKey, TokenToKVPoolAllocator, TreeNode
from .spec import CheckResult, ExerciseSpec, GradedCase, check_exercise

SplitNodeFn = Callable[[RadixCache, RadixKey, TreeNode, int], TreeNode]


def reference_split_node(*args: Any) -> Any:
    """The instructor's answer, loaded on demand from ``answers_tree`` (absent from the executor process)."""
    from .answers_tree import reference_split_node as answer
    return answer(*args)


def build_cache(paths: list[list[int]], page_size: int = 1, extra_key: str | None = None,
                priority: int = 0) -> RadixCache:
    """A cache holding ``paths`` (each path's slots: 100 + its position in an allocator), built with no
    split: every path's parents are inserted before it, so each insert ends on a node boundary."""
    alloc = TokenToKVPoolAllocator(512, page_size)
    cache = RadixCache(page_size, token_to_kv_pool_allocator=alloc)
    for tokens in sorted(paths, key=len):
        key = RadixKey(tokens, extra_key)
        have = cache.match_prefix(key).device_indices  # ends on a boundary: no split
        cache.insert(key, torch.cat([have, alloc.alloc(len(tokens) - len(have))]), priority=priority)
    return cache


def node_row(node: Any, page_size: int, filed_as: Any = None) -> list:
    """One node as [id, parent id, tokens, slots, lock_ref, hit_count, priority, last_access_time, is_view,
    filed under its own first page], read attribute by attribute (never through the cache's methods)."""
    value = getattr(node, "value", None)
    slots = None if value is None else [int(v) for v in value.tolist()]
    view = value is not None and (value._base is not None or
                                  value.untyped_storage().nbytes() != value.numel() * value.element_size())
    return [node.id, getattr(getattr(node, "parent", None), "id", None), list(node.key.token_ids), slots,
            int(node.lock_ref), int(node.hit_count), int(node.priority), int(node.last_access_time), bool(view),
            filed_as is None or filed_as == node.key.child_key(page_size)]


def rows(cache: RadixCache) -> list[list]:
    """Every node reachable from the root as a ``node_row`` plus the id of the node it was reached from."""
    out, stack = [], [cache.root_node]
    while stack:
        node = stack.pop()
        for ck, child in dict(node.children).items():
            if len(out) > 500:
                raise RecursionError("more than 500 nodes: a cycle in the tree?")
            out.append(node_row(child, cache.page_size, ck) + [node.id])
            stack.append(child)
    return sorted(out)


FIELDS = ("id", "parent", "tokens", "slots", "lock_ref", "hit_count", "priority", "last_access_time", "view",
          "filed_under_its_first_page", "reached_from")


def drive(split_node: SplitNodeFn, args: dict) -> dict:
    """Build the cache, lock a live request's node, run the operations with ``split_node``; plain data out."""
    page = args.get("page_size", 1)
    ns = args.get("extra_key")
    cache = build_cache(args["paths"], page, ns, args.get("priority", 0))
    locked = cache.match_prefix(RadixKey(args["lock"], ns)).last_node if args.get("lock") else None
    if locked is not None:
        cache.inc_lock_ref(locked)
    before = {str(r[0]): r[2] for r in rows(cache)}  # JSON keys are text
    calls: list[dict] = []

    def installed(key: RadixKey, child: TreeNode, split_len: int) -> TreeNode:
        old_parent, child_id = child.parent, child.id
        new = split_node(cache, key, child, split_len)
        is_node = isinstance(new, TreeNode)
        kids = dict(getattr(new, "children", {}) or {}) if is_node else {}
        filed = next((k for k, c in kids.items() if c is child), None)
        calls.append({"returned": new.id if is_node else repr(new)[:100], "child": child_id,
                      "child_row": dict(zip(FIELDS, node_row(child, page, filed))),
                      "new_row": dict(zip(FIELDS, node_row(new, page))) if is_node else None,
                      "child_below_new": filed is not None,
                      "parent_now_points_to": getattr(dict(old_parent.children).get(key.child_key(page)), "id", None)})
        return new
    cache._split_node = installed  # type: ignore[method-assign]  # the instance attribute shadows the method
    results = []
    for op, tokens in args["ops"]:
        key = RadixKey(tokens, ns)
        if op == "insert":  # value=None: the token ids stand in for new slots (SGLang's simulation fallback)
            results.append(cache.insert(key))
        else:
            m = cache.match_prefix(key)
            results.append([[int(v) for v in m.device_indices.tolist()], m.last_node.id])
    after = rows(cache)
    try:
        cache.check_invariants()
        broken = ""
    except AssertionError as exc:
        broken = str(exc) or "an invariant"
    unlocked = ""
    if locked is not None:
        try:
            cache.dec_lock_ref(locked)  # the live request finishes: its lock must come off cleanly
            cache.check_invariants()
        except (AssertionError, ValueError) as exc:
            unlocked = str(exc) or "an invariant"
    return {"calls": calls, "results": results, "after": after, "broken": broken, "unlock": unlocked,
            "locked_id": None if locked is None else locked.id, "before": before,
            "protected_after_unlock": cache.protected_size_}


def compare(got: dict, want: dict, args: dict) -> str | None:
    """The first mistake the evidence shows, named (the seed's direction, the parent, the lock, views...)."""
    if got == want:
        return None
    what = f"paths {args['paths']}, then {args['ops']}"
    for g, w in zip(got["calls"], want["calls"]):
        child_id, cg, cw, ng, nw = w["child"], g["child_row"], w["child_row"], g["new_row"], w["new_row"]
        if cg["tokens"] != cw["tokens"] and ng and ng["tokens"] == cw["tokens"] or cg["tokens"] == nw["tokens"]:
            return (f"{what}: the original node #{child_id} now holds {cg['tokens']}, expected the suffix "
                    f"{cw['tokens']}: your new node holds the suffix. In SGLang the new node holds the prefix and the "
                    "original object keeps the suffix (so a request's last_node still ends where it did); the "
                    "teaching tree's direction is the other way round")
        if g["returned"] == child_id:
            return (f"{what}: split_node returned the child it was given (#{child_id}); return the *new* node, "
                    "the one that now holds the shared prefix")
        if ng is None:
            return f"{what}: split_node must return the new TreeNode, got {g['returned']}"
        if g["parent_now_points_to"] != g["returned"]:
            return (f"{what}: the parent's children entry still points at #{g['parent_now_points_to']}: "
                    "re-point the parent at the new node (parent.children[key.child_key(page_size)] = new_node), "
                    "or the new node is unreachable")
        if not g["child_below_new"]:
            return f"{what}: the new node's children must hold the original node #{child_id} (the suffix)"
        if cg["parent"] != g["returned"]:
            return f"{what}: node #{child_id}'s parent must now be the new node (child.parent = new_node)"
        if ng["parent"] != cw["parent"] and nw["parent"] == cw["parent"] or ng["parent"] != nw["parent"]:
            return f"{what}: the new node's parent must be the child's old parent (#{nw['parent']})"
        if not cg["filed_under_its_first_page"]:
            return (f"{what}: the new node files its child under the wrong key: use the suffix's own first "
                    "token/page, child.key.child_key(cache.page_size), after the cut (namespace included)")
        if ng["lock_ref"] != nw["lock_ref"]:
            return (f"{what}: the new prefix node has lock_ref={ng['lock_ref']}, expected {nw['lock_ref']}: "
                    "copy the child's lock_ref; every live request that locked the child also locks its new parent")
        if ng["view"] or cg["view"]:
            return (f"{what}: a node's value is a view of the old index tensor (it keeps the whole storage alive): "
                    "clone both halves (SGLang PR #17191)")
        for f in ("tokens", "slots"):
            if ng[f] != nw[f] or cg[f] != cw[f]:
                return (f"{what}: {f} after the split: new node {ng[f]}, child {cg[f]}; expected "
                        f"{nw[f]} and {cw[f]} (the first split_len units go to the new node)")
        for f in ("priority", "hit_count", "last_access_time"):
            if ng[f] != nw[f]:
                return (f"{what}: the new node's {f} is {ng[f]}, expected {nw[f]}: the new node "
                        f"inherits the child's {f} (it stands for the same shared prefix)")
    if len(got["calls"]) != len(want["calls"]):
        return (f"{what}: {len(got['calls'])} splits happened, expected {len(want['calls'])}: after your first "
                "split the tree no longer leads the walk to the right node")
    if got["broken"]:
        return f"{what}: the cache's invariants fail after your split: {got['broken']}"
    if got["unlock"]:
        return f"{what}: when the live request unlocks node #{got['locked_id']}: {got['unlock']}"
    if got["results"] != want["results"]:
        return f"{what}: the operations returned {got['results']}, expected {want['results']}"
    return f"{what}: the tree after the split differs from the reference"


WORDS = list(range(1, 60))


def cases(seed: int = 0) -> list[GradedCase]:
    """The notebook's replay (main) and hidden shapes (pages, a namespace, a split during a match)."""
    rng = random.Random(seed)
    t = rng.sample(range(1, 99), 12) if seed else [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    a = [t[0], t[1], t[2]]

    def case(name: str, paths: list, ops: list, part: str = "main", weight: float = 1.0, **extra: Any) -> GradedCase:
        return GradedCase(name, {"paths": paths, "ops": ops, **extra}, part, weight)
    return [
        case("insert [1, 2, 3] then [1, 2, 9]: the fork at 2", [a], [["insert", [t[0], t[1], t[8]]]], weight=2),
        case("a live request holds [1, 2, 3]; a match of [1, 2] splits its edge", [a], [["match", a[:2]]],
             lock=a),
        case("a split during a match that ends mid-edge, below a shared node",
             [t[:2], t[:6]], [["match", t[:4]], ["match", t[:6]]], "boundary", lock=t[:6]),
        case("split at 1 and at the last unit of a long edge", [t[:6]],
             [["insert", [t[0], t[9]]], ["insert", t[:5] + [t[10]]]], "boundary"),
        case("pages of 2: the cut and the child keys are whole pages", [t[:8]],
             [["insert", t[:4] + [t[10], t[11]]]], "boundary", page_size=2, lock=t[:8]),
        case("a namespace (extra_key): the child keys carry it", [t[:4]],
             [["insert", t[:2] + [t[11], t[10]]]], "boundary", extra_key="tenant-b", lock=t[:4]),
        case("a node with children and a lock is split", [t[:4], t[:4] + [t[5]], t[:4] + [t[6]]],
             [["insert", t[:2] + [t[9]]]], "boundary", lock=t[:4] + [t[5]]),
        case("a node of priority 3 is split: the prefix keeps the priority", [t[:5]],
             [["insert", t[:3] + [t[9]]]], "boundary", priority=3),
    ]


SPEC = ExerciseSpec(
    id="02.2", optional=True, title="SGLang's _split_node (optional)", function="split_node",
    check="check_split_node",
    reference=reference_split_node, drive=drive, cases=cases, compare=compare,
    forbidden=("_split_node", "reference_split_node"),
    # absent from the grader's executor: the split itself (the walks that call it then cannot split)
    strip=("radixlab.mem_cache.radix_cache:RadixCache._split_node",))
SPECS = [SPEC]


def check_split_node(split_node: SplitNodeFn, *, record: bool = True) -> CheckResult:
    """Check a student's ``split_node(cache, key, child, split_len)`` in SGLang's direction (optional 02.2)."""
    return check_exercise(SPEC, split_node, record=record)
