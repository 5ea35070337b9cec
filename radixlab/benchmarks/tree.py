"""``python -m radixlab bench tree``: the radix tree's cost per op, fast vs readable matcher vs SGLang.

Notebook 11_performance_boundaries plots these numbers. Every timed op is one call between two
``perf_counter_ns`` reads, the lanes interleaved (A, B, C then C, B, A) on the same inputs, gc off
while timing; medians and p90s, ratios from the same run. Sections:

1. the reference workload (``workloads.ReferenceTreeWorkload``: 100 system prompts x 50 turns):
   full-hit match, system-prompt hit, miss, insert, each with the key built beforehand and from
   a plain token list (SGLang handed the ``array('q')`` its ``Req`` holds), evict-everything and
   build time; SGLang 0.5.17's own RadixCache joins when its wheel is cached (``fetch-sglang``).
   Floor lanes run in the same interleaved loops (``FLOOR_*``: the C-level work of a full hit and
   of an insert, a bare Python walk and insert, packing a list), and ``targets`` reads each of
   radixlab's targets against the floor under it;
2. growing trees (1k -> 10k nodes by default, 100k with ``--big``): per-op cost vs tree size;
3. the compare itself vs edge length (bytes / array('q') / tuple), and what converting a token
   list costs (the floor for a tree in C++/Rust fed Python lists);
4. memory: bytes per cached token of the tree (tracemalloc for Python objects,
   ``untyped_storage().nbytes()`` for index tensors) vs the KV bytes those tokens occupy.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import resource
import statistics
import struct
import sys
import time
import timeit
import tracemalloc
from array import array
from collections import deque
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..mem_cache import RadixCache, RadixKey, TreeNode
from ..mem_cache.radix_key import ITEM, key_over, pack_tokens
from ..sim.workloads import ReferenceTreeWorkload, fresh

RECORD = Path(__file__).parent / "records" / "tree.json"
HUGE = 10**12
# KV bytes per token: 2 (K and V) x layers x KV heads x head_dim x 2 bytes (fp16/bf16)
KV_MODELS = {"SmolLM2-135M (30 layers, 3 KV heads x 64)": 2 * 30 * 3 * 64 * 2,
             "Llama-2-7B (32 layers, 32 KV heads x 128)": 2 * 32 * 32 * 128 * 2}
pc = time.perf_counter_ns


# ---------------------------------------------------------------------------------------------
# Sides: one small adapter per cache
# ---------------------------------------------------------------------------------------------


class Side:
    """How to drive one cache: build keys, match, insert, evict (``native`` = from what its request holds)."""

    def __init__(self, name: str, new: Callable[[], Any], key: Callable, native: Callable,
                 match: Callable, match_native: Callable, insert: Callable, insert_native: Callable,
                 evict_all: Callable, hit_len: Callable) -> None:
        self.name, self.new, self.key, self.native = name, new, key, native
        self.match, self.match_native, self.insert, self.insert_native = match, match_native, insert, insert_native
        self.evict_all, self.hit_len = evict_all, hit_len


def radixlab_side(matcher: str) -> Side:
    def key(toks: list[int]) -> RadixKey:
        k = RadixKey(toks)
        if matcher == "readable":
            _ = k.units  # the readable walk's form (tuples of ints), made when the key is built
        return k

    return Side(matcher, lambda: RadixCache(matcher=matcher), key, lambda toks: toks,
                lambda c, k: c.match_prefix(k), lambda c, toks: c.match_prefix(toks),
                lambda c, k, v: c.insert(k, v), lambda c, toks, v: c.insert(toks, v),
                lambda c: c.evict(HUGE), lambda r: len(r.device_indices))


class NoOpAllocator:
    """SGLang's cache calls its allocator's free_segment on evict; radixlab's (allocator=None) calls nothing."""

    device = "cpu"

    def free_segment(self, *args: Any, **kwargs: Any) -> None:
        pass

    free = free_segments = free_segment


def sglang_side() -> Side | None:
    """SGLang 0.5.17's RadixCache from the cached wheel, or None when it is not cached."""
    from .. import sglang_ref

    if sglang_ref.wheel_path() is None:
        return None
    sg = sglang_ref.load()
    SKey, MP, IP, EP = sg.RadixKey, sg.MatchPrefixParams, sg.InsertParams, sg.EvictParams
    return Side("sglang", lambda: sg.new_cache(allocator=NoOpAllocator()), lambda toks: SKey(array("q", toks)), lambda toks: array("q", toks),
                lambda c, k: c.match_prefix(MP(key=k)), lambda c, arr: c.match_prefix(MP(key=SKey(arr))),
                lambda c, k, v: c.insert(IP(key=k, value=v)), lambda c, arr, v: c.insert(IP(key=SKey(arr), value=v)),
                lambda c: c.evict(EP(num_tokens=HUGE)).num_tokens_evicted, lambda r: len(r.device_indices))


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


def stats(ns: Sequence[float]) -> dict:
    s = sorted(ns)
    n = len(s)
    med = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return {"n": n, "median_us": med / 1e3, "p90_us": s[min(n - 1, math.ceil(0.9 * n) - 1)] / 1e3}


IN_FLIGHT = 64
"""Results each lane keeps alive while it is timed: the ``prefix_indices`` of requests in flight."""


def interleaved(lanes: list[tuple[str, Callable, list]], check: Callable[[int, dict], None] | None = None,
                keep: int = IN_FLIGHT, warmup: int = IN_FLIGHT) -> tuple[dict[str, list], float]:
    """Time ``fn(args[i])`` for every lane and i; lanes run A,B,C then C,B,A. Returns the times and
    the minor page faults per timed call (of the whole process while the lanes run: all lanes, the
    checks, averaged; read it as "does this loop grow the heap?", not as one lane's cost).

    Each lane keeps its last ``keep`` results alive and lets older ones go, as a server keeps the
    ``prefix_indices`` of the requests in flight and frees those of finished ones. Until ``keep``
    results are in flight the heap grows; after that a new result reuses freed memory. So the
    first ``warmup`` calls run untimed (when there are more than twice as many calls). Keeping
    *every* result would grow the heap on every call, and the kernel's page faults (a fresh page
    zeroed on first touch) would add microseconds to every lane of whichever loop runs first.
    ``check(i, {lane: result})`` sees every call's results, outside the timing.
    """
    times: dict[str, list] = {name: [] for name, _, _ in lanes}
    kept = {name: deque(maxlen=keep) for name, _, _ in lanes}
    n = min(len(a) for _, _, a in lanes)
    warm = warmup if n > 2 * warmup else 0
    gc.collect()
    gc.disable()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt  # (taken again after the warm-up)
    try:
        for i in range(n):
            if i == warm:
                faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            now = {}
            for name, fn, args in (lanes if i % 2 == 0 else lanes[::-1]):
                a = args[i]
                t0 = pc()
                r = fn(a)
                t1 = pc()
                if i >= warm:
                    times[name].append(t1 - t0)
                now[name] = r
                kept[name].append(r)
            if check is not None:
                check(i, now)
    finally:
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        gc.enable()
    return times, faults / max(1, (n - warm) * len(lanes))


def build(side: Side, reqs: list[list[int]], native: bool = False) -> tuple[Any, float]:
    """A fresh cache holding every request; (cache, seconds). Slot indices 0, 1, 2... per request."""
    cache = side.new()
    items = [((side.native(t) if native else side.key(t)), torch.arange(i * len(t), (i + 1) * len(t)))
             for i, t in enumerate(reqs)]
    ins = side.insert_native if native else side.insert
    gc.collect()
    gc.disable()
    try:
        t0 = pc()
        for k, v in items:
            ins(cache, k, v)
        t1 = pc()
    finally:
        gc.enable()
    return cache, (t1 - t0) / 1e9


# ---------------------------------------------------------------------------------------------
# 1. The reference workload and 2. growing trees
# ---------------------------------------------------------------------------------------------


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
                    args = [s.native(fresh(q)) if s.name == "sglang" else fresh(q) for q in qs]
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


# ---------------------------------------------------------------------------------------------
# 3. The compare and the conversion, by length
# ---------------------------------------------------------------------------------------------


def _best_ns(stmt: str, env: dict, number: int = 200, repeat: int = 7) -> float:
    return min(timeit.repeat(stmt, globals=env, number=number, repeat=repeat)) / number * 1e9


def compare_costs(lengths: Sequence[int] = (1, 8, 64, 512, 4096), number: int = 200) -> list[dict]:
    """ns to compare two equal runs of n tokens, and to find a mismatch in the middle, per representation."""
    from ..mem_cache.radix_key import common_prefix_len, packed_prefix_len

    rows = []
    for n in lengths:
        toks = list(range(1000, 1000 + n))
        a, b = fresh(toks), fresh(toks)
        mid = b[:]
        mid[n // 2] = -1
        env = {"ab": array("q", a).tobytes(), "bb": array("q", b).tobytes(), "mb": array("q", mid).tobytes(),
               "aa": array("q", a), "ba": array("q", b), "at": tuple(a), "bt": tuple(b), "mt": tuple(mid),
               "ppl": packed_prefix_len, "cpl": common_prefix_len}
        rows.append({"tokens": n,
                     "bytes ==": _best_ns("ab == bb", env, number),
                     "array('q') ==": _best_ns("aa == ba", env, number),
                     "tuple == (own ints)": _best_ns("at == bt", env, number),
                     "find mismatch: packed": _best_ns("ppl(ab, mb)", env, number),
                     "find mismatch: tuple": _best_ns("cpl(at, mt)", env, number)})
    return rows


def conversion_costs(lengths: Sequence[int] = (16, 128, 1200, 8192), number: int = 100) -> list[dict]:
    """ns to turn a list of n Python ints into each form a native tree could take."""
    import numpy as np


    rows = []
    for n in lengths:
        lst = fresh(range(1000, 1000 + n))
        env = {"lst": lst, "array": array, "np": np, "pack": pack_tokens, "tuple": tuple, "struct": struct}
        rows.append({"tokens": n,
                     "struct pack (RadixKey)": _best_ns("pack(lst)", env, number),
                     "array('q', list)": _best_ns("array('q', lst)", env, number),
                     "numpy.array(list)": _best_ns("np.array(lst, dtype=np.int64)", env, number),
                     "torch.tensor(list)": _best_ns("torch.tensor(lst)", {**env, "torch": torch}, max(1, number // 5)),
                     "tuple(list)": _best_ns("tuple(lst)", env, number)})
    return rows


# ---------------------------------------------------------------------------------------------
# 4. Memory
# ---------------------------------------------------------------------------------------------


def tree_memory(reqs: list[list[int]], matcher: str = "fast") -> dict:
    """Bytes of the tree per cached token: Python objects (tracemalloc) + index tensors (storage bytes)."""
    keys = [RadixKey(t) for t in reqs]
    vals = [torch.arange(i * len(t), (i + 1) * len(t)) for i, t in enumerate(reqs)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cache = RadixCache(matcher=matcher)
    for k, v in zip(keys, vals):
        cache.insert(k, v)
    if matcher == "readable":  # what the readable walk leaves cached on every node: the tuples of ints
        for node in cache.nodes():
            _ = node.key.units
    del keys, vals
    gc.collect()
    python_bytes = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    _, tensor_bytes = cache.index_memory()  # bytes the index tensors' storages hold (tracemalloc misses them)
    key_bytes = sum(len(node.key.packed) for node in cache.nodes())
    tokens = cache.total_size()
    out = {"matcher": matcher, "nodes": cache.num_nodes(), "tokens": tokens,
           "python_bytes_per_token": python_bytes / tokens, "tensor_bytes_per_token": tensor_bytes / tokens,
           "packed_key_bytes_per_token": key_bytes / tokens,
           "tree_bytes_per_token": (python_bytes + tensor_bytes) / tokens,
           "kv_bytes_per_token": dict(KV_MODELS)}
    out["tree_share_of_kv"] = {m: out["tree_bytes_per_token"] / kv for m, kv in KV_MODELS.items()}
    return out


def path_memo_cost(cache: RadixCache) -> dict:
    """Index bytes per cached token now (one tensor per edge) and in a *path memo* design, where every
    node keeps the index tensor of its whole path from the root (its own edge's indices are the tail
    of it), so a hit ending at a node hands that tensor back without a copy. Counted from ``cache``'s
    nodes: {tokens, nodes, index_bytes_per_token, memo_bytes_per_token, growth}."""
    edge = memo = nodes = 0
    stack = [(cache.root_node, 0)]
    while stack:
        node, depth = stack.pop()
        for child in node.children.values():
            n = len(child.value)
            edge, memo, nodes = edge + n, memo + depth + n, nodes + 1
            stack.append((child, depth + n))
    if not edge:
        raise ValueError("cache must hold at least one token")
    return {"tokens": edge, "nodes": nodes, "index_bytes_per_token": 8.0, "memo_bytes_per_token": 8.0 * memo / edge,
            "growth": memo / edge}


# ---------------------------------------------------------------------------------------------
# 5. The tree inside a serving loop
# ---------------------------------------------------------------------------------------------

CACHE_METHODS = ("match_prefix", "insert", "inc_lock_ref", "dec_lock_ref", "evict", "cache_finished_req",
                 "cache_unfinished_req")


def _timed(obj: Any, names: Sequence[str], acc: dict) -> None:
    """Wrap ``obj``'s methods so each outermost call's ns lands in ``acc[name]`` (a list).

    A call made from inside another wrapped call (``cache_finished_req`` calling ``insert``) is
    neither timed nor counted again: its time is already inside its caller's.
    """
    depth = [0]
    for name in names:
        real = getattr(obj, name)

        def wrapper(*a: Any, _real: Callable = real, _name: str = name, **k: Any) -> Any:
            depth[0] += 1
            t0 = pc()
            try:
                return _real(*a, **k)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    acc.setdefault(_name, []).append(pc() - t0)

        setattr(obj, name, wrapper)


def engine_cache_share(trace: Sequence[Any], model: Any, page_size: int = 1, max_total_tokens: int = 8192,
                       **engine_kwargs: Any) -> dict:
    """Serve ``trace`` through ``radixlab.engine.Engine``; where the scheduler's CPU time goes.

    Returns the wall time of ``generate``, the time inside the model's forward (what a GPU would
    run), the time inside the tree's methods (outermost calls), and the tree's share of the rest
    (the scheduler's own CPU time). On a busy machine one preempted call can add milliseconds to
    a total, so it also returns, per method, the number of outermost calls (deterministic for a
    given trace and policy) and the median µs per call, and ``tree_us_per_request_median``: the
    sum over methods of calls x median per call, per request (what the notebook 11 rate uses).
    """
    from ..engine import Engine

    engine = Engine(model, page_size=page_size, max_total_tokens=max_total_tokens, **engine_kwargs)
    prompts = [list(r.prompt_ids) for r in trace]
    params = [{"max_new_tokens": max(1, len(r.output_ids)), "ignore_eos": True} for r in trace]
    engine.generate(prompts[:2], params[:2])  # warm-up (first calls into torch are slow), then start empty
    engine.flush_cache()
    cache_ns: dict[str, list] = {}
    fwd: dict[str, list] = {}
    _timed(engine.tree_cache, CACHE_METHODS, cache_ns)
    _timed(engine.model_runner, ("forward",), fwd)
    t0 = pc()
    engine.generate(prompts, params)
    wall = pc() - t0
    tree = sum(sum(v) for v in cache_ns.values())
    forward = sum(fwd.get("forward", []))
    sched = wall - forward
    med = {k: statistics.median(v) / 1e3 for k, v in cache_ns.items()}
    calls = {k: len(v) for k, v in cache_ns.items()}
    return {"requests": len(trace), "wall_ms": wall / 1e6, "forward_ms": forward / 1e6,
            "scheduler_ms": sched / 1e6, "tree_ms": tree / 1e6, "tree_share_of_scheduler": tree / sched,
            "tree_us_per_request": tree / 1e3 / len(trace), "tree_calls": sum(calls.values()),
            "calls_by_method": calls, "median_us_by_method": med,
            "tree_us_per_request_median": sum(calls[k] * med[k] for k in calls) / len(trace),
            "by_method_ms": {k: sum(v) / 1e6 for k, v in cache_ns.items()}}


def bottleneck_rate(tree_us_per_request: float) -> float:
    """Requests per second at which ``tree_us_per_request`` of work per request fills the scheduler's thread.

    The scheduler runs on one CPU thread (the GIL): one CPU-second per second, whatever the GPU's
    step length (a step of s ms holds the work of s * 1000 / cost requests, s cancels). Beyond this
    rate the GPU waits for Python (the overlap loop hides the work behind the GPU's step only up to it).
    """
    if tree_us_per_request <= 0:
        raise ValueError(f"tree_us_per_request must be positive, got {tree_us_per_request}")
    return 1e6 / tree_us_per_request


# ---------------------------------------------------------------------------------------------
# The whole run, the record, the printout
# ---------------------------------------------------------------------------------------------


def yardstick(reqs: list[list[int]], system_len: int = 1000) -> dict:
    """One ``bytes ==`` of a request's tokens, and the two floors under a match that are not the tree:
    ``torch.cat`` of a full hit's two index tensors (SGLang pays it too) and packing the token list."""
    toks = reqs[0]
    n = len(toks)
    env = {"ab": array("q", toks).tobytes(), "bb": array("q", fresh(toks)).tobytes(), "torch": torch,
           "path": [torch.arange(system_len), torch.arange(n - system_len)], "pack": pack_tokens, "lst": fresh(toks)}
    return {"tokens": n, "bytes_eq_ns": _best_ns("ab == bb", env, 2000, 50),
            "torch_cat_path_ns": _best_ns("torch.cat(path)", env, 500, 20),
            "pack_list_ns": _best_ns("pack(lst)", env, 200, 20)}


def run(prompts: int = 100, turns: int = 50, ops: int = 1000, evict_reps: int = 3,
        growth_sizes: Sequence[int] = (1000, 10000), growth_ops: int = 300, use_sglang: bool = True,
        seed: int = 0, progress: bool = True, timeit_number: int = 200) -> dict:
    """Everything ``bench tree`` measures, as one JSON-able record."""
    say = (lambda *a: print(*a, file=sys.stderr, flush=True)) if progress else (lambda *a: None)
    sides = [radixlab_side("fast"), radixlab_side("readable")]
    sg = sglang_side() if use_sglang else None
    if sg is not None:
        sides.append(sg)
    from .. import sglang_ref

    rec: dict = {"env": {"python": sys.version.split()[0], "torch": torch.__version__, "platform": platform.platform(),
                         "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
                         "sides": [s.name for s in sides], "sglang": sglang_ref.SGLANG_VERSION if sg else None,
                         "prompts": prompts, "turns": turns, "ops": ops, "seed": seed}}
    t0 = time.perf_counter()
    wl = ReferenceTreeWorkload(prompts, turns, seed=seed)
    reqs = wl.requests()
    say(f"reference workload: {len(reqs)} requests of {wl.system_len + wl.turn_len} tokens")
    rec["reference"] = op_table(sides, wl, reqs, ops)
    say("ops timed; building and evicting")
    eb = evict_and_build(sides, reqs, evict_reps)
    rec["reference"]["ops"].update(eb["ops"])
    rec["reference"]["agree"] = rec["reference"]["agree"] and eb["agree"]
    rec["reference"]["nodes"] = prompts * (turns + 1)
    rec["yardstick"] = yardstick(reqs, wl.system_len)
    say("memory")
    rec["memory"] = [tree_memory(reqs, "fast"), tree_memory(reqs[: max(1, len(reqs) // 5)], "readable")]
    del reqs
    gc.collect()
    say("compare and conversion by length")
    rec["compare_ns"] = compare_costs(number=timeit_number)
    rec["conversion_ns"] = conversion_costs(number=max(1, timeit_number // 2))
    rec["growth"] = growth(sides, growth_sizes, growth_ops, seed=seed, progress=lambda s: say(f"growth {s} nodes done"))
    rec["env"]["loadavg_end"] = os.getloadavg()
    rec["env"]["wall_s"] = time.perf_counter() - t0
    return rec


def ratio_rows(rec: dict, base: str = "sglang") -> list[tuple[str, dict]]:
    """(op, {side: median / base median}) for every op of the reference table."""
    out = []
    for op, by in rec["reference"]["ops"].items():
        if base in by:
            out.append((op, {s: by[s]["median_us"] / by[base]["median_us"] for s in by}))
    return out


def format_record(rec: dict) -> str:
    sides = rec["env"]["sides"]
    lines = [f"## Reference workload: {rec['env']['prompts']} prompts x {rec['env']['turns']} turns "
             f"({rec['reference']['nodes']} nodes), median / p90 per op (build and evict in ms)",
             "| op | " + " | ".join(sides) + " | " + " | ".join(f"{s}/{b}" for s, b in _pairs(sides)) + " |",
             "|---" * (1 + len(sides) + len(_pairs(sides))) + "|"]
    for op, by in rec["reference"]["ops"].items():
        scale, unit = (1e-3, "ms") if op.startswith(("build", "evict")) else (1, "us")
        cells = [f"{by[s]['median_us'] * scale:.1f} / {by[s]['p90_us'] * scale:.1f} {unit}" if s in by else "-" for s in sides]
        ratios = [f"{by[a]['median_us'] / by[b]['median_us']:.2f}x" if a in by and b in by else "-" for a, b in _pairs(sides)]
        lines.append(f"| {op} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    y = rec["yardstick"]
    full = rec["reference"]["ops"].get("full-hit match (key)", {}).get("fast")
    lines.append(f"\nyardstick: bytes == of {y['tokens']} tokens {y['bytes_eq_ns']:.0f} ns"
                 + (f"; fast full-hit match = {full['median_us'] * 1e3 / y['bytes_eq_ns']:.0f}x that" if full else ""))
    if full:
        lines.append(f"tokens compared per second (fast full hit): {y['tokens'] / full['median_us'] * 1e6 / 1e6:.0f} M")
    if "torch_cat_path_ns" in y:
        lines.append(f"floors: torch.cat of a full hit's two index tensors {y['torch_cat_path_ns'] / 1e3:.1f} us "
                     f"(= {y['torch_cat_path_ns'] / y['bytes_eq_ns']:.0f}x bytes ==); packing the {y['tokens']}-token list "
                     f"{y['pack_list_ns'] / 1e3:.1f} us")
    lines += _floor_lines(rec)
    if "sglang" in sides and "fast" in sides:
        rows = targets(rec)
        lines += ["", "## Targets (fast / SGLang, this run)"] + format_targets(rows) + target_verdicts(rows)
    lines.append(f"results agree across sides: {rec['reference']['agree']}")
    lines.append("\n## Compare n equal tokens / find a mismatch in the middle (ns)")
    cols = list(rec["compare_ns"][0])[1:]
    lines.append("| tokens | " + " | ".join(cols) + " |")
    for r in rec["compare_ns"]:
        lines.append(f"| {r['tokens']} | " + " | ".join(f"{r[c]:.0f}" for c in cols) + " |")
    lines.append("\n## Converting a list of n Python ints (ns)")
    cols = list(rec["conversion_ns"][0])[1:]
    lines.append("| tokens | " + " | ".join(cols) + " |")
    for r in rec["conversion_ns"]:
        lines.append(f"| {r['tokens']} | " + " | ".join(f"{r[c]:.0f}" for c in cols) + " |")
    lines.append("\n## Memory: bytes per cached token")
    for m in rec["memory"]:
        share = ", ".join(f"{k.split(' ')[0]} {v:.3%}" for k, v in m["tree_share_of_kv"].items())
        lines.append(f"  {m['matcher']:8s} tree ({m['nodes']} nodes, {m['tokens']} tokens): {m['tree_bytes_per_token']:.1f} B/token "
                     f"(Python objects {m['python_bytes_per_token']:.1f}, index tensors {m['tensor_bytes_per_token']:.1f}); "
                     f"of the KV bytes: {share}")
    if rec["growth"]:
        lines.append("\n## Growing trees (key built): median us per op")
        ops = list(rec["growth"][0]["median_us"])
        lines.append("| nodes | " + " | ".join(f"{op}: " + " / ".join(sides) for op in ops) + " |")
        for g in rec["growth"]:
            lines.append(f"| {g['nodes']} | " + " | ".join(
                " / ".join(f"{g['median_us'][op][s]:.1f}" if s in g["median_us"][op] else "-" for s in sides) for op in ops) + " |")
    lines.append(f"\nload average {rec['env']['loadavg_start']} -> {rec['env']['loadavg_end']}, wall {rec['env']['wall_s']:.0f} s")
    return "\n".join(lines)


# (label, op, floor lane, what the lane does): each floor lane read against base's whole call for op
FLOOR_OPS = [
    ("full-hit match (key)", "full-hit match (key)", FLOOR_CAT, "torch.cat of the result (the copy alone)"),
    ("full-hit match (key), C-level", "full-hit match (key)", FLOOR_MATCH, "compare each edge + torch.cat of the result"),
    ("full-hit match (key), bare Python", "full-hit match (key)", FLOOR_BARE_MATCH,
     "a bare Python walk: nodes, compares, torch.cat"),
    ("full-hit match (key), no copy", "full-hit match (key)", FLOOR_BARE_WALK,
     "the bare walk handing back a tensor it holds (no torch.cat)"),
    ("insert (key), C-level", "insert (key)", FLOOR_INSERT, "compare the cached edge, slice the new key, copy the indices"),
    ("insert (key), bare Python", "insert (key)", FLOOR_BARE_INSERT, "a bare Python insert: walk, compare, make the leaf"),
] + [(f"{op} (list)", f"{op} (list)", pack_floor(op), "packing the list")
     for op in ("full-hit match", "system-prompt hit", "miss", "insert")]
FLOOR_TEXT = {label: text for label, _, _, text in FLOOR_OPS}


def floor_ratios(rec: dict, base: str = "sglang") -> dict[str, tuple[float, float]]:
    """{label: (us, us / base's median for that op)} for the work every tree of its kind must do.

    With the key built: for the full hit, ``torch.cat`` of the hit's indices, then that plus the
    compares (C-level work), then a bare Python walk doing both; for the insert, its C-level work
    and a bare Python insert (see ``FLOOR_OPS``). Packing the token list for every op fed a list
    (radixlab converts it; SGLang's ``Req`` already holds ``array('q')``). Timed as separate calls in the same run: the
    parts of one call do not add up exactly (each part's cost depends on what ran just before it:
    caches, the allocator), so read these as estimates of a floor, next to the hot ``timeit``
    figures of ``yardstick``.
    """
    fl, ops = rec["reference"].get("floors", {}), rec["reference"]["ops"]
    return {label: (fl[f]["median_us"], fl[f]["median_us"] / ops[op][base]["median_us"])
            for label, op, f, _ in FLOOR_OPS if f in fl and base in ops.get(op, {})}


# The targets radixlab set for its fast tree (ratio to SGLang's Python tree, same run, lower is better),
# and for each the same-run floor that bounds it: work no tree of its kind can skip.
TARGETS = [("full-hit match (key)", 0.3, "full-hit match (key), bare Python"),
           ("system-prompt hit (key)", 0.3, None),
           ("insert (key)", 0.3, "insert (key), bare Python"),
           ("miss (key)", 1.0, None),
           ("build (key)", 0.5, None),
           ("full-hit match (list)", 1.0, "full-hit match (list)"),
           ("system-prompt hit (list)", 1.0, "system-prompt hit (list)"),
           ("insert (list)", 1.0, "insert (list)")]


def targets(rec: dict, side: str = "fast", base: str = "sglang") -> list[dict]:
    """One row per target: {op, target, ratio (side / base, same run), met, floor, floor_ratio}.

    ``floor_ratio`` is the same-run work alone (``floor_ratios``) as a ratio to ``base``'s whole
    call, where one bounds the op; ``floor_with_walk`` adds, for an op fed a list, ``side``'s own
    call on a built key (packing, then the walk that reads the bytes: the least radixlab can do).
    """
    ops, floors, rows = rec["reference"]["ops"], floor_ratios(rec, base), []
    for op, target, floor in TARGETS:
        by = ops.get(op, {})
        if side not in by or base not in by:
            continue
        ratio = by[side]["median_us"] / by[base]["median_us"]
        row = {"op": op, "target": target, "ratio": ratio, "met": ratio <= target,
               "floor": floor if floor in floors else None, "floor_ratio": floors[floor][1] if floor in floors else None}
        built = ops.get(op.replace("(list)", "(key)"), {})
        if op.endswith("(list)") and row["floor"] and side in built and base in by:
            row["floor_with_walk"] = row["floor_ratio"] + built[side]["median_us"] / by[base]["median_us"]
        rows.append(row)
    return rows


def format_targets(rows: list[dict]) -> list[str]:
    """The targets as text lines (``bench tree`` prints them; so does notebook 11)."""
    lines = [f"{'op':26s} {'target':>7s} {'measured':>9s}   floor in the same run (work no such tree can skip)"]
    for r in rows:
        floor = ""
        if r["floor"]:
            floor = f"{r['floor_ratio']:.2f}x: {FLOOR_TEXT[r['floor']]}"
            if "floor_with_walk" in r:
                floor += f"; + the walk on a built key = {r['floor_with_walk']:.2f}x"
            if r.get("floor_with_walk", r["floor_ratio"]) > r["ratio"]:
                floor += " (above the whole call: parts timed apart do not add up)"
        lines.append(f"{r['op']:26s} {'<=' + format(r['target'], '.1f') + 'x':>7s} {r['ratio']:8.2f}x "
                     f"{'  met' if r['met'] else ' MISS'} {floor}")
    return lines


def target_verdicts(rows: list[dict]) -> list[str]:
    """For each missed target with a floor: is the floor itself above the target (a wall for this
    design), or how much room does it leave, against what radixlab spends beyond it?"""
    out = []
    for r in rows:
        if r["met"] or r["floor_ratio"] is None:
            continue
        floor = r.get("floor_with_walk", r["floor_ratio"])
        if floor >= r["target"]:
            out.append(f"-> {r['op']}: the floor ({floor:.2f}x) is above the target itself: out of reach for a tree "
                       "of this design")
        else:
            out.append(f"-> {r['op']}: floor {floor:.2f}x, target {r['target']:.2f}x: room above the floor "
                       f"{r['target'] - floor:.2f}x; radixlab spends {r['ratio'] - floor:.2f}x above it")
    return out


# (op, its floor lanes from the least work up, another design's floor): notebook 11's ladders
LADDERS = [("full-hit match (key)", ("full-hit match (key)", "full-hit match (key), C-level",
                                     "full-hit match (key), bare Python"), "full-hit match (key), no copy"),
           ("insert (key)", ("insert (key), C-level", "insert (key), bare Python"), None)]


def format_ladders(rec: dict, side: str = "fast", base: str = "sglang") -> list[str]:
    """Per op of ``LADDERS``: each floor lane, then ``side``'s whole call and what of it lies beyond
    the bare walk (the last rung), then the other design's floor; all as µs and x ``base``."""
    fr, ops, lines = floor_ratios(rec, base), rec["reference"]["ops"], []
    for op, labels, other in LADDERS:
        by = ops.get(op, {})
        if side not in by or base not in by or any(label not in fr for label in labels):
            continue
        sg, ours = by[base]["median_us"], by[side]["median_us"]
        lines.append(f"{op}: SGLang {sg:.1f} µs")
        for label in labels:
            kind = label.split(", ")[1] if ", " in label else "copy only"
            lines.append(f"   {kind + ':':12s} {FLOOR_TEXT[label]:62s} {fr[label][0]:5.1f} µs = {fr[label][1]:.2f}x SGLang")
        bare = fr[labels[-1]][0]
        lines.append(f"   {'radixlab:':12s} {'the whole call':62s} {ours:5.1f} µs = {ours / sg:.2f}x SGLang"
                     f"  ({ours - bare:.1f} µs = {(ours - bare) / ours:.0%} of it beyond the bare walk)")
        if other in fr:
            lines.append(f"   {'no copy:':12s} {FLOOR_TEXT[other]:62s} {fr[other][0]:5.1f} µs = {fr[other][1]:.2f}x SGLang"
                         "  (the path memo's floor)")
        lines.append("")
    return lines


def bytes_eq_target(full_us: float, copy_us: float, walk_us: float | None, bytes_eq_ns: float,
                    limit: float = 20.0) -> dict:
    """The target "a full hit within ``limit`` x one ``bytes ==`` of the request": the full hit, the
    copy of its result and (if timed) a walk that copies nothing, each as a multiple of the compare;
    ``met``, and whether the copy alone, or even the walk, is over the limit (a wall for the design)."""
    if bytes_eq_ns <= 0:
        raise ValueError(f"bytes_eq_ns must be positive, got {bytes_eq_ns}")
    full_x, copy_x = full_us * 1e3 / bytes_eq_ns, copy_us * 1e3 / bytes_eq_ns
    walk_x = None if walk_us is None else walk_us * 1e3 / bytes_eq_ns
    return {"limit": limit, "full_x": full_x, "copy_x": copy_x, "walk_x": walk_x, "met": full_x <= limit,
            "copy_over": copy_x > limit, "walk_over": walk_x is not None and walk_x > limit}


def skipped_copy(rec: dict, base: str = "sglang") -> tuple[float, float, float] | None:
    """(µs, radixlab's ratio as measured, its ratio had it copied too) for the system-prompt hit:
    SGLang's Python tree copies a one-edge hit's indices, radixlab hands back the node's own tensor."""
    fl, ops = rec["reference"].get("floors", {}), rec["reference"]["ops"].get("system-prompt hit (key)", {})
    if SKIPPED_COPY not in fl or base not in ops or "fast" not in ops:
        return None
    us, fast, sg = fl[SKIPPED_COPY]["median_us"], ops["fast"]["median_us"], ops[base]["median_us"]
    return us, fast / sg, (fast + us) / sg


def _floor_lines(rec: dict) -> list[str]:
    fl = rec["reference"].get("floors", {})
    lines = [f"same run: {name} {st['median_us']:.1f} / {st['p90_us']:.1f} us" for name, st in fl.items()]
    y, ops = rec.get("yardstick", {}), rec["reference"]["ops"]
    hot = {FLOOR_CAT: y.get("torch_cat_path_ns"), FLOOR_PACK: y.get("pack_list_ns")}
    ratios = floor_ratios(rec)
    for label, op, floor, _ in FLOOR_OPS:
        if label not in ratios:
            continue
        ns = hot.get(FLOOR_PACK if floor.startswith(FLOOR_PACK) else floor)
        low = f"{ns / 1e3 / ops[op]['sglang']['median_us']:.2f}x (hot, timeit) to " if ns else ""
        lines.append(f"  {label}: that work alone is {low}{ratios[label][1]:.2f}x (in the run) SGLang's whole call")
    sk = skipped_copy(rec)
    if sk:
        lines.append(f"  system-prompt hit (key): SGLang's Python tree copies the edge's indices ({sk[0]:.1f} us), radixlab "
                     f"returns the node's own tensor (as SGLang's C++ tree does): {sk[1]:.2f}x as measured, "
                     f"{sk[2]:.2f}x had it copied too")
    return lines


def _pairs(sides: list[str]) -> list[tuple[str, str]]:
    pairs = [("fast", "readable")] if "readable" in sides else []
    if "sglang" in sides:
        pairs += [("fast", "sglang"), ("readable", "sglang")]
    return pairs


def load_record(path: str | Path | None = None) -> dict:
    """The saved record notebook 11 reads (``bench tree --save`` writes it)."""
    return json.loads(Path(path or RECORD).read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m radixlab bench tree", description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=100)
    ap.add_argument("--turns", type=int, default=50)
    ap.add_argument("--ops", type=int, default=1000, help="timed calls per op and side")
    ap.add_argument("--evict-reps", type=int, default=3)
    ap.add_argument("--growth", default="1000,10000", help="tree sizes in nodes ('' skips)")
    ap.add_argument("--big", action="store_true", help="add a 100,000-node tree to the growth section")
    ap.add_argument("--growth-ops", type=int, default=300)
    ap.add_argument("--no-sglang", action="store_true", help="leave SGLang's RadixCache out even if its wheel is cached")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="write the record here")
    ap.add_argument("--save", action="store_true", help=f"write the record notebook 11 reads ({RECORD.name})")
    args = ap.parse_args(argv)
    for name in ("prompts", "turns", "ops", "evict_reps", "growth_ops"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    sizes = [int(s) for s in args.growth.split(",") if s.strip()] + ([100_000] if args.big else [])
    rec = run(args.prompts, args.turns, args.ops, args.evict_reps, sizes, args.growth_ops, not args.no_sglang, args.seed)
    print(format_record(rec))
    for path in [args.json] + ([RECORD] if args.save else []):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(rec, indent=1))
            print(f"wrote {path}")
    return 0 if rec["reference"]["agree"] and all(g["agree"] for g in rec["growth"]) else 1
