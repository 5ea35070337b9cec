"""Exercise 05.1 (notebook 05_request_lifecycle_and_locks): the hand-over of ``cache_finished_req``.

``cache_finished_req(cache, req)`` is called when ``req`` finishes: afterwards each slot of its row
is the tree's or free (the tree adopts the whole pages it lacked; the request's copies of tokens the
tree already had and the unaligned tail are freed) and the lock ``admit`` took on ``req.last_node``
is dropped. The drive replays requests (admit, prefill, decode, finish, some of them interleaved)
with the student's function in place of radixlab's, and after every finish reports the tree (tokens,
slots, ``lock_ref``), the allocator's free pages and which of the request's slots leaked or were
freed while the tree still holds them: the check names the slot range that went wrong.
"""

from __future__ import annotations

import random
from typing import Any, Callable

from ..mem_cache import RadixCache, ReqToTokenPool, Request, TokenToKVPoolAllocator, admit, extend
from .spec import CheckResult, ExerciseSpec, GradedCase, check_exercise

Handover = Callable[[Any, Any], Any]


def _reference(cache: Any, req: Any) -> None:
    from .answers_handover import reference_cache_finished_req  # only in the grader's (or check cell's) process

    return reference_cache_finished_req(cache, req)


def _tree(cache: RadixCache) -> list[list]:
    """Every node as [id, parent id, namespace, tokens, slots, lock_ref], read attribute by attribute."""
    rows, stack = [], [cache.root_node]
    while stack:
        node = stack.pop()
        for child in dict(node.children).values():
            slots = [] if child.value is None else [int(v) for v in child.value.tolist()]
            rows.append([child.id, node.id, repr(child.key.extra_key), list(child.key.token_ids), slots,
                         int(child.lock_ref)])
            stack.append(child)
    return sorted(rows)


def _finish(fn: Handover, cache: RadixCache, req: Request, label: str) -> dict:
    """Call ``fn`` on a finished request, then do the caller's part (the row back); the step as data."""
    alloc, pool = cache.token_to_kv_pool_allocator, cache.req_to_token_pool
    kv = [int(s) for s in pool.req_to_token[req.req_pool_idx, : req.seq_len].tolist()]
    locked = None if req.last_node is None or req.last_node is cache.root_node else req.last_node.id
    step = {"label": label, "seq_len": req.seq_len, "protected": req.cache_protected_len,
            "n_tokens": len(req.all_ids), "page_size": cache.page_size, "locked": locked}
    try:
        fn(cache, req)
    except NotImplementedError:
        raise
    except Exception as exc:  # the student's call stopped half-way: say where, keep the rest comparable
        step["raised"] = f"{type(exc).__name__}: {exc}"[:300]
    row = req.req_pool_idx
    pool.free(row)
    req.req_pool_idx, req.last_node, req.finished = None, None, True
    alloc.free_pages.sort()  # the order frees happened in is not the lesson: later allocations stay comparable
    tree = _tree(cache)
    in_tree = {s for r in tree for s in r[4]}
    page = alloc.page_size
    free = {p * page + o for p in alloc.free_pages for o in range(page)}
    step["tree"], step["free_pages"] = tree, list(alloc.free_pages)
    step["leaked"] = [i for i, s in enumerate(kv) if i >= step["protected"] and s not in in_tree and s not in free]
    step["freed_but_cached"] = [i for i, s in enumerate(kv) if s in in_tree and s in free]
    return step


def drive(fn: Handover, args: dict) -> list[dict]:
    """Replay ``args['ops']``; ``fn`` stands in for ``cache_finished_req``. One dict per finish."""
    p = args["page_size"]
    alloc = TokenToKVPoolAllocator(128, page_size=p)
    cache = RadixCache(p, token_to_kv_pool_allocator=alloc, req_to_token_pool=ReqToTokenPool(8, 96))
    reqs: dict[str, Request] = {}
    steps: list[dict] = []
    for op in args["ops"]:
        kind, rid = op[0], op[1]
        if kind == "admit":
            reqs[rid] = Request(rid, list(op[2]), extra_key=op[3] if len(op) > 3 else None)
            admit(reqs[rid], cache)
        elif kind == "prefill":
            extend(reqs[rid], cache)
        elif kind == "decode":  # op[2]: the sampled tokens; each one but the last is fed back (its KV written)
            req = reqs[rid]
            for k, token in enumerate(op[2]):
                if k:
                    extend(req, cache, 1)
                req.output_ids.append(token)
        elif kind == "finish":
            steps.append(_finish(fn, cache, reqs[rid], f"{rid} finishes"))
            if "raised" in steps[-1]:
                break
    return steps


def _explain(got: dict, want: dict) -> str:
    what = f"{got['label']} (page_size={got['page_size']}, {got['seq_len']} tokens with KV in the row"
    what += f", the first {got['protected']} the tree's)" if got["protected"] else ")"
    if "raised" in got:
        text = got["raised"]
        if "lock_ref is already 0" in text or "no lock was taken" in text:
            return (f"{what}: your function raised {text}. Unlock the node the request locked when it was admitted, "
                    "req.last_node, once; not the node where your insert ended")
        if "len(value)" in text:
            return (f"{what}: your function raised {text}. Insert one slot per token: the first req.seq_len tokens of "
                    "origin_input_ids + output_ids have KV in the row (the last sampled token was never fed back)")
        if "not allocated" in text or "freed twice" in text:
            return (f"{what}: your function raised {text}: it freed a slot twice or one the request does not own")
        return f"{what}: your function raised {text}"
    seq, prot = got["seq_len"], got["protected"]
    key_len = seq // got["page_size"] * got["page_size"]
    if got["freed_but_cached"]:
        pos = got["freed_but_cached"]
        if pos[0] < prot:
            return (f"{what}: you freed row positions {pos}, slots the tree still holds: the first "
                    f"req.cache_protected_len={prot} slots were the tree's (the request only locked them); "
                    "free duplicates from cache_protected_len on")
        return (f"{what}: you freed row positions {pos}, pages the tree just adopted: free only the duplicates "
                "(cache_protected_len up to what insert says was already cached) and the unaligned tail")
    missing_tokens = {tuple(r[3]) for r in want["tree"]} - {tuple(r[3]) for r in got["tree"]}
    if {r[2] for r in got["tree"]} != {r[2] for r in want["tree"]}:
        return (f"{what}: the tree holds the request's tokens in the wrong namespace: insert "
                "RadixKey(tokens, req.extra_key)")
    if got["leaked"]:
        pos = got["leaked"]
        if pos[0] >= key_len:
            return (f"{what}: row positions {pos} are neither the tree's nor free: the unaligned tail (less than a "
                    f"page, positions {key_len}..{seq - 1}) leaked; free it")
        if not missing_tokens:
            return (f"{what}: row positions {pos} are neither the tree's nor free: the tree already had those tokens "
                    "(another request cached them meanwhile; insert returns how many), so your copies are "
                    "duplicates: free them")
        return f"{what}: row positions {pos} are neither the tree's nor free, and the tree lacks tokens it should hold"
    if missing_tokens or len(got["tree"]) != len(want["tree"]):
        n_got = sum(len(r[3]) for r in got["tree"])
        n_want = sum(len(r[3]) for r in want["tree"])
        if n_got < n_want and got["n_tokens"] > key_len:
            return (f"{what}: the tree holds {n_got} tokens, expected {n_want}: insert every whole page of "
                    "origin_input_ids + output_ids whose KV is in the row (the decoded tokens too)")
        return f"{what}: the tree differs from the reference ({n_got} tokens, expected {n_want})"
    locks_got = {r[0]: r[5] for r in got["tree"]}
    locks_want = {r[0]: r[5] for r in want["tree"]}
    if locks_got != locks_want:
        more = sorted(i for i in locks_want if locks_got.get(i, 0) > locks_want[i])
        if more:
            return (f"{what}: node #{more[0]} is still locked (lock_ref {locks_got[more[0]]}, expected "
                    f"{locks_want[more[0]]}): drop the request's lock, cache.dec_lock_ref(req.last_node)")
        return f"{what}: lock_refs differ from the reference: unlock req.last_node exactly once"
    if got["free_pages"] != want["free_pages"]:
        return f"{what}: the allocator's free pages differ from the reference"
    return f"{what}: differs from the reference"


def compare(got: Any, want: list[dict], args: dict) -> str | None:
    if got == want:
        return None
    if not isinstance(got, list):
        return f"an answer of an unexpected shape came back: {repr(got)[:120]}"
    for g, w in zip(got, want):
        if g != w:
            return _explain(g, w)
    return f"{len(got)} requests finished, expected {len(want)}"


def _random_ops(rng: random.Random, page_size: int, n: int = 5) -> list[list]:
    """``n`` requests over a tiny alphabet (shared stems, duplicates), interleaved at random."""
    stem = [rng.randint(1, 3) for _ in range(12)]
    ops, live = [], []
    for i in range(n):
        rid = f"r{i}"
        prompt = stem[: rng.randint(0, 12)] + [rng.randint(1, 3) for _ in range(rng.randint(1, 8))]
        ops += [["admit", rid, prompt], ["prefill", rid], ["decode", rid, [rng.randint(1, 3) for _ in range(rng.randint(1, 4))]]]
        live.append(rid)
        while live and (len(live) > 2 or rng.random() < 0.4):
            ops.append(["finish", live.pop(rng.randrange(len(live)))])
    ops += [["finish", rid] for rid in live]
    return ops


def cases(seed: int = 0) -> list[GradedCase]:
    rng = random.Random(seed)
    o = 0 if seed == 0 else rng.randrange(10, 80)  # the grader renames the visible tokens
    t = lambda *xs: [o + x for x in xs]  # noqa: E731
    example = [["admit", "A", t(1, 2, 3, 4, 5, 6)], ["prefill", "A"], ["decode", "A", t(11, 12, 13)], ["finish", "A"],
               ["admit", "B", t(1, 2, 7, 8, 9)], ["prefill", "B"], ["decode", "B", t(14, 15)], ["finish", "B"]]
    twins = [["admit", "A", t(1, 2, 3, 4, 5)], ["admit", "B", t(1, 2, 3, 4, 5)], ["prefill", "A"], ["prefill", "B"],
             ["decode", "A", t(7, 8)], ["decode", "B", t(7, 9)], ["finish", "A"], ["finish", "B"]]
    paged = [["admit", "A", t(*range(1, 10))], ["prefill", "A"], ["decode", "A", t(20, 21, 22)], ["finish", "A"],
             ["admit", "B", t(*range(1, 7), 30)], ["prefill", "B"], ["decode", "B", t(31, 32)], ["finish", "B"]]
    one_tail = [["admit", "A", t(*range(1, 7))], ["prefill", "A"], ["decode", "A", t(20, 21, 22, 23)], ["finish", "A"]]
    lora = [["admit", "A", t(1, 2, 3, 4)], ["prefill", "A"], ["decode", "A", t(5, 6)], ["finish", "A"],
            ["admit", "B", t(1, 2, 3, 4), "lora-A"], ["prefill", "B"], ["decode", "B", t(5, 6)], ["finish", "B"]]
    c = lambda ops, p=1: {"page_size": p, "ops": ops}  # noqa: E731
    return [
        GradedCase("the worked example: A, then B sharing [1, 2] (page_size 1)", c(example), weight=2),
        GradedCase("two requests with the same prompt, running at once: the second one's copies are duplicates",
                   c(twins), weight=2),
        GradedCase("page_size 4: the unaligned tail is freed", c(paged, 4), "boundary", 2),
        GradedCase("page_size 4: a tail of one token is freed too", c(one_tail, 4), "boundary"),
        GradedCase("page_size 2, the twins", c(twins, 2), "boundary"),
        GradedCase("a second namespace (extra_key)", c(lora), "boundary"),
        GradedCase("random interleavings, page_size 1", c(_random_ops(rng, 1)), "boundary"),
        GradedCase("random interleavings, page_size 4", c(_random_ops(rng, 4), 4), "boundary"),
    ]


SPEC = ExerciseSpec(
    id="05.1", title="the hand-over of cache_finished_req", function="cache_finished_req",
    check="check_cache_finished_req", reference=_reference, drive=drive, cases=cases, compare=compare,
    forbidden=("cache_finished_req", "cache_unfinished_req", "release", "reference_cache_finished_req"),
    strip=("radixlab.mem_cache.radix_cache:RadixCache.cache_finished_req",
           "radixlab.mem_cache.radix_cache:RadixCache.cache_unfinished_req",
           # the interface's abstract methods too: left alone, RadixCache without them could not be built
           "radixlab.mem_cache.base_prefix_cache:BasePrefixCache.cache_finished_req",
           "radixlab.mem_cache.base_prefix_cache:BasePrefixCache.cache_unfinished_req",
           "radixlab.mem_cache.common:release"))
SPECS = [SPEC]


def check_cache_finished_req(cache_finished_req: Handover, *, record: bool = True) -> CheckResult:
    """Check a student's ``cache_finished_req(cache, req)`` (exercise 05.1)."""
    return check_exercise(SPEC, cache_finished_req, record=record)
