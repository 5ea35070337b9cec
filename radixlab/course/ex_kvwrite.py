"""Exercise 07.2, optional (notebook 07_kv_memory_pool, "Going further"): the write side of the index chain.

The student writes ``write_new_kv(req_to_token_pool, allocator, kv_pool, batch, new_kv) -> out_cache_loc``:
for an EXTEND batch (``batch`` lists ``(req_pool_idx, prefix_len, extend_len)`` per request) it takes
slots for every request's new tokens from the allocator (``alloc_extend``, so that with pages a
request's first new tokens continue its last page), records them in the request's row after its
prefix, stores every layer's new K/V there with ``set_kv_buffer``, and returns ``out_cache_loc``: one
slot per new token, request by request in batch order (what ``ScheduleBatch.prepare_for_extend``
hands the model and ``RadixAttention`` writes through).

``drive`` builds a small pool from plain case data (pages handed out in a scrambled order, rows that
already hold a cached prefix, one of them shared by two rows, a bystander row), calls the student's
function and returns the state afterwards as plain data: the returned slots, every row, every
layer's K and V buffers, the allocator's free list. The reference does the same on a twin pool.
"""

from __future__ import annotations

import random
from typing import Any, Callable

import torch

from ..mem_cache import MHATokenToKVPool, ReqToTokenPool, TokenToKVPoolAllocator
from .spec import CheckResult, ExerciseSpec, GradedCase, check_exercise

WriteNewKV = Callable[[ReqToTokenPool, TokenToKVPoolAllocator, MHATokenToKVPool, list, list], torch.Tensor]

LAYERS, HEADS, DIM, ROWS, CONTEXT = 2, 2, 2, 4, 40


def _reference(*args: Any) -> Any:
    from .answers_kvwrite import reference_write_new_kv
    return reference_write_new_kv(*args)


def build(args: dict) -> tuple[ReqToTokenPool, TokenToKVPoolAllocator, MHATokenToKVPool, list, list]:
    """The pools before the batch: ``args["reqs"]`` lists ``{"row", "prefix", "new", "shares"}``; a request
    with ``shares`` took its (page-aligned) prefix from that row, as a radix hit gives it. Row 3 is a
    bystander that holds a finished request's stale slots. Everything is drawn from ``args["seed"]``."""
    page, seed = args["page_size"], args["seed"]
    size = 16 * page if page > 1 else 32
    alloc = TokenToKVPoolAllocator(size, page)
    pages = alloc.alloc(size)
    order = list(range(size // page))
    random.Random(seed).shuffle(order)
    for p in order:  # hand the pages back scrambled: a slot number says nothing about a position
        alloc.free(pages[p * page:(p + 1) * page])
    rows = ReqToTokenPool(ROWS, CONTEXT, token_to_kv_pool_allocator=alloc)
    for _ in range(ROWS):
        rows.alloc()
    pool = MHATokenToKVPool(size, page, torch.float32, HEADS, DIM, LAYERS)
    g = torch.Generator().manual_seed(seed)
    for layer in range(LAYERS):  # whatever earlier requests left there
        pool.k_buffer[layer].copy_(torch.randn(size, HEADS, DIM, generator=g))
        pool.v_buffer[layer].copy_(torch.randn(size, HEADS, DIM, generator=g))
    rows.req_to_token[3] = torch.randint(size, (CONTEXT,), generator=g)  # a finished request's stale slots
    for r in args["reqs"]:
        if r["prefix"] == 0:
            continue
        if r.get("shares") is not None:
            rows.write(r["row"], 0, rows.row(r["shares"], r["prefix"]))
        else:
            rows.write(r["row"], 0, alloc.alloc_extend(0, -1, r["prefix"]))
    total = sum(r["new"] for r in args["reqs"])
    new_kv = [(torch.randn(total, HEADS, DIM, generator=g), torch.randn(total, HEADS, DIM, generator=g))
              for _ in range(LAYERS)]
    batch = [(r["row"], r["prefix"], r["new"]) for r in args["reqs"]]
    return rows, alloc, pool, batch, new_kv


def _plain_slots(t: Any) -> Any:
    if isinstance(t, torch.Tensor) and t.dim() == 1 and not t.is_floating_point() and t.dtype != torch.bool:
        return [int(x) for x in t.tolist()]
    return f"not a 1-D integer tensor: {type(t).__name__}" + (f" {t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else "")


def drive(fn: Callable, args: dict) -> dict:
    """Build the pools, call ``fn``; what it left behind, as plain data (read attribute by attribute)."""
    rows, alloc, pool, batch, new_kv = build(args)
    given = [(k.clone(), v.clone()) for k, v in new_kv]
    out = fn(rows, alloc, pool, list(batch), given)
    return {"returned": _plain_slots(out),
            "rows": [[int(x) for x in rows.req_to_token[i].tolist()] for i in range(ROWS)],
            "k": [[round(float(x), 5) for x in pool.k_buffer[i].flatten().tolist()] for i in range(LAYERS)],
            "v": [[round(float(x), 5) for x in pool.v_buffer[i].flatten().tolist()] for i in range(LAYERS)],
            "free_pages": list(alloc.free_pages)}


def _slot_values(state: dict, what: str, layer: int, slot: int) -> list[float]:
    n = HEADS * DIM
    return state[what][layer][slot * n:(slot + 1) * n]


def compare(got: dict, want: dict, args: dict) -> str | None:
    """The first thing that differs, said so that a student can act on it."""
    if got == want:
        return None
    what = f"page_size {args['page_size']}, batch {[(r['row'], r['prefix'], r['new']) for r in args['reqs']]}"
    if not isinstance(got["returned"], list):
        return f"{what}: return out_cache_loc, the batch's new slots as one 1-D tensor; got {got['returned']}"
    n_got, n_want = len(got["free_pages"]), len(want["free_pages"])
    if n_got < n_want and args["page_size"] > 1:
        return (f"{what}: the allocator has {n_got} free pages left, the reference {n_want}: you took a new page where a "
                "request's last page still had room. With pages, its first new tokens fill the rest of that page: "
                "allocator.alloc_extend(prefix_len, last_loc, extend_len), last_loc the slot of position prefix_len - 1")
    if n_got != n_want:
        return (f"{what}: the allocator has {n_got} free pages left, the reference {n_want}: take exactly the "
                "slots the new tokens need, request by request, with allocator.alloc_extend")
    if got["free_pages"] != want["free_pages"] or sorted(got["returned"]) != sorted(want["returned"]):
        return (f"{what}: your new tokens sit in other slots than alloc_extend gives: with pages, a request's first "
                "new tokens fill the rest of its last page (pass prefix_len and last_loc, the slot of position "
                "prefix_len - 1, taken from its row), the others start new pages")
    if got["returned"] != want["returned"]:
        return (f"{what}: out_cache_loc holds the right slots in another order: it must list one slot per new "
                "token, request by request in batch order, as new_kv's rows are")
    reqs = {r["row"]: r for r in args["reqs"]}
    for i, (g, w) in enumerate(zip(got["rows"], want["rows"])):
        if g == w:
            continue
        p = next(j for j, (a, b) in enumerate(zip(g, w)) if a != b)
        if i not in reqs:
            return f"{what}: row {i} changed at position {p}, but it is not in the batch"
        r = reqs[i]
        if p < r["prefix"]:
            return (f"{what}: row {i} position {p} was overwritten: positions 0 .. {r['prefix'] - 1} are its cached "
                    f"prefix; the new slots go at positions {r['prefix']} .. {r['prefix'] + r['new'] - 1}")
        if p < r["prefix"] + r["new"]:
            return (f"{what}: row {i} position {p} does not hold the new token's slot: record each request's new "
                    "slots in its row (req_to_token_pool.write), or a later gather reads stale K/V")
        return f"{what}: row {i} changed at position {p}, past the request's new tokens"
    for kind in ("k", "v"):
        for layer in range(LAYERS):
            if got[kind][layer] == want[kind][layer]:
                continue
            if layer and got[kind][0] == want[kind][0]:
                return (f"{what}: layer 0's buffers are right but layer {layer}'s {kind.upper()} is not: every layer "
                        "has its own K and V buffers, and new_kv[layer] holds that layer's new K/V")
            n = HEADS * DIM
            slot = next(s for s in range(len(want[kind][layer]) // n)
                        if _slot_values(got, kind, layer, s) != _slot_values(want, kind, layer, s))
            if kind == "v" and _slot_values(got, "v", layer, slot) == _slot_values(want, "k", layer, slot):
                return f"{what}: the V buffer of layer {layer} holds K: store v in the V buffer"
            return (f"{what}: slot {slot} of layer {layer}'s {kind.upper()} buffer holds other values than it should: new "
                    "token i's K/V (row i of new_kv[layer]) go into slot out_cache_loc[i] (kv_pool.set_kv_buffer), "
                    "and no other slot changes")
    return f"{what}: the pools after your function differ from the reference"


def cases(seed: int = 0) -> list[GradedCase]:
    """Seed 0: the check cell's. Another seed scrambles the pages differently and draws other lengths."""
    rng = random.Random(seed)
    d = (lambda lo, hi, v: v if seed == 0 else rng.randint(lo, hi))

    def c(page: int, *reqs: tuple) -> dict:
        return {"page_size": page, "seed": seed,
                "reqs": [{"row": r, "prefix": p, "new": n, "shares": s} for r, p, n, s in reqs]}

    a_new, b_new = d(2, 6, 3), d(2, 6, 4)
    return [
        GradedCase("one new request (row 0, nothing cached) prefills 5 tokens", c(1, (0, 0, d(3, 7, 5), None))),
        GradedCase(f"an EXTEND batch: row 0 ({a_new} new after 6 cached) and row 1 (its first 4 tokens shared with "
                   f"row 0, {b_new} new)", c(1, (0, 6, a_new, None), (1, 4, b_new, 0)), weight=2),
        GradedCase("a DECODE-like batch: one new token for each of three rows",
                   c(1, (0, 5, 1, None), (1, 7, 1, None), (2, 2, 1, None)), "boundary"),
        GradedCase("pages of 4: a prefix of 6 ends inside a page, the new tokens fill it first",
                   c(4, (0, 6, d(3, 9, 5), None)), "boundary"),
        GradedCase("pages of 4: a shared page-aligned prefix and a fresh request in one batch",
                   c(4, (1, 8, d(1, 6, 3), None), (2, 8, d(1, 6, 6), 1), (0, 0, d(2, 7, 7), None)), "boundary", weight=2),
    ]


SPEC = ExerciseSpec(
    id="07.2", optional=True, title="the write side", function="write_new_kv", check="check_write_new_kv",
    reference=_reference, drive=drive, cases=cases, compare=compare,
    forbidden=("reference_write_new_kv",),
    # the engine's own allocate-and-record step (half of the answer); absent in the grader's executor
    strip=("radixlab.mem_cache.common:alloc_at",))
SPECS = [SPEC]


def check_write_new_kv(fn: WriteNewKV, *, record: bool = True) -> CheckResult:
    """Check a student's ``write_new_kv(req_to_token_pool, allocator, kv_pool, batch, new_kv)`` (exercise 07.2)."""
    return check_exercise(SPEC, fn, record=record)
