"""``bench tree``, sections 1 and 2: per-op cost on the reference workload and on growing trees.

The reference workload is ``sim.workloads.ReferenceTreeWorkload`` (100 system prompts x 50
turns): full-hit match, system-prompt hit, miss, insert, evict-everything and build, each lane
beside its floor lanes (``FLOOR_*``: the C-level work of a full hit and of an insert, a bare
Python walk and insert, packing a list).
"""

from __future__ import annotations

import gc
from typing import Callable, Sequence

import torch

from ..mem_cache import RadixCache, RadixKey, TreeNode
from ..mem_cache.radix_key import ITEM, key_over, pack_tokens
from ..sim.workloads import ReferenceTreeWorkload, fresh
from .tree_timing import Side, build, interleaved, pc, stats


def op_table(sides: list[Side], wl: ReferenceTreeWorkload, reqs: list[list[int]], ops: int,
             forms: Sequence[str] = ("key", "list"), floors: bool = True) -> dict:
    """Per-op stats for every side on trees holding ``reqs``; hit lengths checked equal across sides.
    ``floors=False`` leaves the floor lanes out (and builds no twin trees for them)."""
    caches = {s.name: build(s, reqs)[0] for s in sides}
    # Each floor lane that reads a tree reads its own twin of the fast tree (built from the same
    # requests): lanes reading the fast tree itself would keep its nodes in the CPU's caches for its
    # own lane, a warmth SGLang's tree (read by one lane) would not get. Measured: it flattered the
    # fast tree by 0.03-0.07x of SGLang's time on the full hit and the insert.
    fast = next((s for s in sides if s.name == "fast"), None)
    twin = (lambda: build(fast, reqs)[0]) if fast is not None and floors else None
    rng = wl.rng
    total = wl.system_len + wl.turn_len
    # a hit that ends inside a turn needs a turn of 2 tokens or more
    mid = [wl.mid_edge_hit(reqs[rng.randrange(len(reqs))]) for _ in range(2 * ops)] if wl.turn_len > 1 else []
    queries = {
        "full-hit match": ([fresh(reqs[rng.randrange(len(reqs))]) for _ in range(ops)], total),
        "system-prompt hit": ([wl.system_hit() for _ in range(ops)], wl.system_len),
        "miss": ([wl.miss() for _ in range(ops)], 0),
        # ends inside a turn's edge: finds the first mismatch (packed_prefix_len) and splits the edge;
        # each form gets its own queries, so (nearly) every timed call splits an edge anew
        "mid-edge hit (split)": ([q for q, _ in mid], [n for _, n in mid]),
    }
    if not mid:
        del queries["mid-edge hit (split)"]
    out: dict = {"ops": {}, "agree": True, "floors": {}, "faults_per_call": {}}

    def timed(label: str, lanes: list, check: Callable[[int, dict], None]) -> None:
        """Run ``lanes`` interleaved; the trees' times go to ``ops[label]``, the floor lanes' to ``floors``."""
        times, faults = interleaved(lanes, check)
        out["ops"][label] = {name: stats(t) for name, t in times.items() if name in caches}
        out["floors"].update({name: stats(t) for name, t in times.items() if name not in caches})
        out["faults_per_call"][label] = faults

    for op, (qs_all, expect_all) in queries.items():
        for j, form in enumerate(forms):
            qs, expect = qs_all, expect_all
            if isinstance(expect_all, list):  # one expected hit per query, fresh queries per form
                qs, expect = qs_all[j * ops:(j + 1) * ops], expect_all[j * ops:(j + 1) * ops]
            lanes = []
            for s in sides:
                c = caches[s.name]
                if form == "key":
                    lanes.append((s.name, (lambda c, s: lambda k: s.match(c, k))(c, s), [s.key(q) for q in qs]))
                else:
                    args = [s.native(fresh(q)) for q in qs]  # radixlab: a list; SGLang: array("q")
                    lanes.append((s.name, (lambda c, s: lambda a: s.match_native(c, a))(c, s), args))
            if floors:
                lanes += _floor_lanes(op, form, qs, twin, expect)
            want = expect if isinstance(expect, list) else [expect] * len(qs)

            def check(i: int, res: dict, want: list = want) -> None:  # every side: the expected hit, the same slots
                first = res[sides[0].name]
                for name in caches:
                    if sides[0].hit_len(res[name]) != want[i] or not torch.equal(first.device_indices,
                                                                                  res[name].device_indices):
                        out["agree"] = False
            timed(f"{op} ({form})", lanes, check)
    for form in forms:  # insert: a cached system prompt + a new turn; each side gets its own requests
        lanes = []
        for s in sides:
            c = caches[s.name]
            new = [wl.new_request() for _ in range(ops)]
            vals = [torch.arange(10**9 + i * total, 10**9 + (i + 1) * total) for i in range(ops)]
            if form == "key":
                args = [(s.key(q), v) for q, v in zip(new, vals)]
                fn = (lambda c, s: lambda kv: s.insert(c, kv[0], kv[1]))(c, s)
            else:
                args = [(s.native(q), v) for q, v in zip(new, vals)]
                fn = (lambda c, s: lambda kv: s.insert_native(c, kv[0], kv[1]))(c, s)
            lanes.append((s.name, fn, args))
        if form == "key" and twin is not None:
            lanes += _insert_floor_lanes(wl, twin, ops, total)
        elif form == "list" and floors:
            lanes.append((pack_floor("insert"), _pack_and_drop, [wl.new_request() for _ in range(ops)]))

        def check_insert(i: int, res: dict) -> None:  # every side: the cached system prompt, nothing more
            for name in caches:
                r = res[name]
                if (r if isinstance(r, int) else r.prefix_len) != wl.system_len:
                    out["agree"] = False
        timed(f"insert ({form})", lanes, check_insert)
    return out


FLOOR_CAT = "torch.cat of a full hit's index tensors"


FLOOR_PACK = "packing the request's token list"


SKIPPED_COPY = "torch.cat of a one-edge hit's index tensor"


FLOOR_MATCH = "a full hit's C-level work (compare each edge on the path, torch.cat the indices)"


FLOOR_BARE_MATCH = "a bare Python full hit (walk the nodes, compare, torch.cat; no clock, no result object)"


FLOOR_BARE_WALK = "a bare Python full hit that copies nothing (hands back a tensor it already holds, as a memo of each path would)"


FLOOR_INSERT = "an insert's C-level work (compare the cached edge, slice the new key, copy the new indices)"


FLOOR_BARE_INSERT = "a bare Python insert (walk the nodes, compare, make the leaf; no clock, counts or checks)"


def _insert_c_work(args: tuple) -> tuple:
    """What an insert of (cached edge + new tail) cannot skip in any Python tree with tensor values:
    one compare of the whole cached edge, the new leaf's key bytes, a private copy of its indices."""
    packed, edge, value, kept = args
    if not packed.startswith(edge):
        raise AssertionError("the floor lane's query must start with the cached edge")
    n = len(edge) >> 3
    made = packed[len(edge):], value.narrow_copy(0, n, value.numel() - n)
    kept.append(made)  # kept for good, as a tree keeps what it inserts
    return made


def _bare_insert(args: tuple) -> TreeNode:
    """The least a Python tree with radixlab's nodes does for that insert: follow the children by
    their first token, compare each edge, make the leaf (key, private index copy, node) and file it
    under its first token. No clock, hit counts, sizes, leaf set or input checks. The leaf goes
    into ``scratch``, never into the tree, so every call walks the same tree."""
    node, packed, value, scratch, kept = args
    pos, end = 0, len(packed)
    while pos < end:
        first = packed[pos:pos + ITEM]
        child = node.children.get(first)
        if child is None or not packed.startswith(child.key.packed, pos):
            break
        pos += len(child.key.packed)
        node = child
    if pos == 0 or pos == end or child is not None:
        raise AssertionError("the floor lane's request must be a cached edge + a new tail")
    leaf = TreeNode(0, key_over(packed[pos:], None, False), value.narrow_copy(0, pos >> 3, (end - pos) >> 3), node, 0)
    scratch[first] = leaf  # filed under its first token (another request's leaf may be replaced here: the
    kept.append(leaf)      # list keeps every leaf for good, as a tree keeps what it inserts)
    return leaf


def _insert_floor_lanes(wl: ReferenceTreeWorkload, twin: Callable[[], RadixCache], ops: int, total: int) -> list:
    """Two lanes timed beside the inserts (key built), each on its own new requests and its own twin
    of the fast tree (``twin()``), left untouched: ``FLOOR_INSERT`` (the C-level work) and
    ``FLOOR_BARE_INSERT``. What they make (bytes, tensors, nodes) is kept for good (a list in their
    arguments), as a tree keeps what it inserts."""
    c_work, bare, scratch, kept = [], [], {}, []
    for lane in (c_work, bare):
        tree = twin()
        for i in range(ops):
            packed = RadixKey(wl.new_request()).packed
            value = torch.arange(2 * 10**9 + i * total, 2 * 10**9 + (i + 1) * total)
            if lane is c_work:
                lane.append((packed, tree.root_node.children[packed[:ITEM]].key.packed, value, kept))
            else:
                lane.append((tree.root_node, packed, value, scratch, kept))
    return [(FLOOR_INSERT, _insert_c_work, c_work), (FLOOR_BARE_INSERT, _bare_insert, bare)]


def _match_c_work(args: tuple) -> torch.Tensor:
    """What a full hit cannot skip in any Python tree with tensor values: compare every cached edge
    on the path with the query (each one ``memcmp``) and hand back one tensor of the path's indices."""
    packed, edges, vals = args
    for edge, pos in edges:
        if not packed.startswith(edge, pos):
            raise AssertionError("the floor lane's query must match its whole path")
    return torch.cat(vals)


def _bare_match(args: tuple) -> torch.Tensor:
    """The least a Python tree with radixlab's nodes does for a full hit: follow the children by
    their first token, compare each edge, ``torch.cat`` the path's indices. No clock, no splits,
    no result object, no input checks; reads the tree, never writes it.

    With ``copy=False`` (``FLOOR_BARE_WALK``) it hands back the last node's own tensor instead of
    the ``torch.cat``: what a tree that kept each path's whole index tensor (a memo, paid for in
    memory) would still do for a full hit, with no new tensor at all."""
    node, packed, copy = args
    pos, end, vals = 0, len(packed), []
    while pos < end:
        child = node.children.get(packed[pos:pos + ITEM])
        if child is None or not packed.startswith(child.key.packed, pos):
            break
        vals.append(child.value)
        pos += len(child.key.packed)
        node = child
    if pos != end:
        raise AssertionError("the floor lane's query must be a full hit")
    return torch.cat(vals) if copy else node.value


def _pack_and_drop(tokens: list[int]) -> None:
    pack_tokens(tokens)  # the bytes are dropped at once, as a match drops the key it built from a list


def _floor_lanes(op: str, form: str, qs: list[list[int]], twin: Callable[[], RadixCache] | None, expect: int) -> list[tuple[str, Callable, list]]:
    """Work timed in the same interleaved run as the trees, to read the trees' times against. A lane
    that reads a tree reads its own twin of the fast tree (``twin()``, same requests), never the
    tree a timed lane reads.

    * ``FLOOR_CAT`` (full hit, key built): a hit spanning two edges must hand back one tensor of its
      slot indices; SGLang and radixlab both ``torch.cat`` the path's tensors. Its results are kept
      as the trees' are (``interleaved``). ``FLOOR_MATCH`` adds the compares, ``FLOOR_BARE_MATCH``
      walks the node objects too, and ``FLOOR_BARE_WALK`` is that walk without the copy.
    * ``pack_floor(op)`` (every op fed a list, one lane per op's loop): a request that arrives as a
      Python list is converted token by token before any C-speed compare (the bytes dropped at
      once, as a match drops them).
    * ``SKIPPED_COPY`` (system-prompt hit, key built): the one edge's indices copied once. SGLang's
      Python tree does this copy; radixlab returns the node's own tensor (read-only), as SGLang's
      C++ tree does. Not a floor: what radixlab's row does not pay.
    """
    if form == "list":
        return [(pack_floor(op), _pack_and_drop, _rotated([fresh(q) for q in qs], 1))]
    if form != "key" or op not in ("full-hit match", "system-prompt hit") or twin is None:
        return []

    def walks(tree: RadixCache) -> list[tuple[bytes, list, list]]:
        """Per query: its own packed bytes, (edge, offset) and the index tensor of each node on its path
        in ``tree`` (read without touching the tree's clock)."""
        out = []
        for q in qs:
            node, pos, vals, edges = tree.root_node, 0, [], []
            packed = RadixKey(q).packed  # its own bytes: the trees' lanes got theirs
            while pos < len(packed) and (child := node.children.get(packed[pos:pos + ITEM])) is not None:
                vals.append(child.value)
                edges.append((child.key.packed, pos))
                pos += len(child.key.packed)
                node = child
            if sum(v.numel() for v in vals) != expect:
                raise AssertionError(f"{op}: the query's path does not cover its hit: the lane would time the wrong copy")
            out.append((packed, edges, vals))
        return out

    if op != "full-hit match":
        return [(SKIPPED_COPY, torch.cat, _rotated([vals for _, _, vals in walks(twin())], 1))]
    bare, walk = twin().root_node, twin().root_node
    return [(FLOOR_CAT, torch.cat, _rotated([vals for _, _, vals in walks(twin())], 1)),
            (FLOOR_MATCH, _match_c_work, _rotated(walks(twin()), 2)),
            (FLOOR_BARE_MATCH, _bare_match, _rotated([(bare, RadixKey(q).packed, True) for q in qs], 3)),
            (FLOOR_BARE_WALK, _bare_match, _rotated([(walk, RadixKey(q).packed, False) for q in qs], 7, 8))]


def _rotated(items: list, k: int, parts: int = 4) -> list:
    """``items`` started k parts (of ``parts``) in: at call i each floor lane reads another request
    than the trees' lanes and the other floor lanes do (within one call i the lanes run back to
    back; with fewer items than ``parts`` some lanes share a start), so no lane finds a request's
    bytes fresh in the CPU's caches from another."""
    if not 0 <= k < parts:
        raise ValueError(f"k must be in [0, {parts}), got {k}")
    shift = k * len(items) // parts
    return items[shift:] + items[:shift]


def pack_floor(op: str) -> str:
    """The name of the packing lane timed beside ``op`` fed a list (each list op times its own)."""
    return FLOOR_PACK if op == "full-hit match" else f"{FLOOR_PACK}, beside the {op}"


def evict_and_build(sides: list[Side], reqs: list[list[int]], reps: int) -> dict:
    """Build time (key built / from lists) and evict-everything time, ``reps`` rounds, sides alternating."""
    res = {s.name: {"build (key)": [], "build (list)": [], "evict all": []} for s in sides}
    evicted = set()
    for rep in range(reps):
        order = sides if rep % 2 == 0 else sides[::-1]
        for s in order:
            for native in (False, True):
                c, t = build(s, reqs, native)
                res[s.name]["build (list)" if native else "build (key)"].append(t * 1e9)
                if not native:
                    gc.collect()
                    gc.disable()
                    try:
                        t0 = pc()
                        n = s.evict_all(c)
                        t1 = pc()
                    finally:
                        gc.enable()
                    res[s.name]["evict all"].append(t1 - t0)
                    evicted.add(n)
                del c
    return {"ops": {op: {name: stats(res[name][op]) for name in res} for op in ("build (key)", "build (list)", "evict all")},
            "agree": len(evicted) == 1}


def growth(sides: list[Side], sizes: Sequence[int], ops: int, system_len: int = 200, turn_len: int = 50,
           seed: int = 0, progress: Callable | None = None) -> list[dict]:
    """Per-op medians vs tree size (nodes): prompts x 99 turns of shorter runs, so nodes grow, not tokens."""
    rows = []
    for size in sizes:
        turns = 99
        prompts = max(1, size // (turns + 1))
        wl = ReferenceTreeWorkload(prompts, turns, system_len, turn_len, seed=seed + size)
        reqs = wl.requests()
        table = op_table(sides, wl, reqs, ops, forms=("key",), floors=False)
        nodes = prompts * (turns + 1)
        ev = evict_and_build(sides, reqs, 1)
        row = {"nodes": nodes, "tokens": prompts * system_len + prompts * turns * turn_len,
               "agree": table["agree"] and ev["agree"],
               "median_us": {op.replace(" (key)", ""): {n: st["median_us"] for n, st in v.items()}
                             for op, v in table["ops"].items()}}
        row["median_us"]["evict all"] = {n: st["median_us"] for n, st in ev["ops"]["evict all"].items()}
        row["median_us"]["build (key)"] = {n: st["median_us"] for n, st in ev["ops"]["build (key)"].items()}
        rows.append(row)
        if progress:
            progress(size)
    return rows


def by_key_length(sides: list[Side], lengths: Sequence[int] = (60, 240, 1200, 4800), ops: int = 100,
                  prompts: int = 10, turns: int = 4, seed: int = 0) -> list[dict]:
    """Per-op medians vs key length: the same tree shape (prompts x turns, two edges per path, a
    system prompt of 5/6 of the key) at every length, so only the tokens per edge change."""
    rows = []
    for n in lengths:
        if n < 2:
            raise ValueError(f"lengths must be at least 2 tokens, got {n}")
        system = n * 5 // 6
        wl = ReferenceTreeWorkload(prompts, turns, system, n - system, seed=seed + n)
        table = op_table(sides, wl, wl.requests(), ops, floors=False)
        rows.append({"tokens": n, "agree": table["agree"],
                     "median_us": {op: {name: st["median_us"] for name, st in v.items()} for op, v in table["ops"].items()}})
    return rows
