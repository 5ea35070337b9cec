"""Exercise 07.1 (notebook 07_kv_memory_pool): write the gather that builds a request's K/V from its row.

The student writes ``gather_kv(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len) -> (k, v)``:
the K and V of the request's tokens ``0 .. seq_len - 1``, in position order, each
``[seq_len, kv_heads, head_dim]``. Position ``p`` of the request lives in KV slot
``req_to_token[req_pool_idx, p]`` — its cached prefix included, whichever request computed it. This
is the read half of ``RadixAttention`` (``radixlab.model.layers.gather_kv``).

The check serves real requests with the tiny model through a real pool (pages handed out in a
scrambled order, so a slot number says nothing about a position; request B reuses request A's cached
prefix pages and sits in row 2) and compares the student's K/V with the K/V that ``forward_dense``
computes for the same tokens (the instructor's gather, ``answers_kvpool``, reads exactly those, which
``tests/test_ex_kvpool.py`` checks). One ``ExerciseSpec`` serves the check cell and the grader:
``drive`` builds the scenario from plain case data and returns the student's K/V as plain lists, so
the grader judges them in its own process. The cases catch the plausible wrong answers: the slot used
as the position, the prefix forgotten, ``seq_len`` off by one, the wrong row, slots sorted out of
position order, a read that writes. The last case runs an EXTEND chunk with the student's gather
inside every ``RadixAttention`` layer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import torch

from ..mem_cache import MHATokenToKVPool, ReqToTokenPool, TokenToKVPoolAllocator
from ..model.forward_batch import ForwardBatch, ForwardMode
from ..model.loader import load_tiny
from ..tokenizer import encode
from .spec import CheckResult, ExerciseSpec, GradedCase, check_exercise

EXERCISE = "07.1"
TITLE = "gather_kv"

GatherKV = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int, int], tuple[torch.Tensor, torch.Tensor]]

SYSTEM = "You are a terse assistant. "
PROMPT_A = SYSTEM + "Hi!"
PROMPT_B = SYSTEM + "What is 2+2?"
PROMPT_C = "Hey"
NEXT_CHUNK = " And 3+3?"


@dataclass
class GatherCase:
    """One question with its answer, plain tensors only: gather ``seq_len`` tokens of row ``req_pool_idx``."""

    name: str
    req_to_token: torch.Tensor       # [rows, max_context_len]
    k_buffers: list[torch.Tensor]    # per layer, [pool size, kv_heads, head_dim]
    v_buffers: list[torch.Tensor]
    req_pool_idx: int
    seq_len: int
    want_k: list[torch.Tensor]       # per layer, [seq_len, kv_heads, head_dim], from forward_dense
    want_v: list[torch.Tensor]
    prefix_len: int = 0              # tokens of this request that another request computed (for messages)


@dataclass
class PoolScenario:
    """Three requests served through one pool: A (row 0), C (row 1), B (row 2, reuses A's prefix pages)."""

    page_size: int
    req_to_token: torch.Tensor
    k_buffers: list[torch.Tensor]
    v_buffers: list[torch.Tensor]
    rows: dict[str, int]
    tokens: dict[str, list[int]]
    prefix_len_b: int
    next_slots_b: list[int]          # free slots for B's next chunk (the mapping case extends B by it)


@lru_cache(maxsize=4)
def build_scenario(page_size: int = 4, seed: int = 0) -> PoolScenario:
    """Serve A, C, then B (B's page-aligned shared prefix taken from A's row, as a radix hit gives
    it) with the tiny model on the CPU; B then decodes 3 greedy tokens.

    The slots are handed out as serving does; the K/V written into them are what ``forward_dense``
    computes for each request (the write half of ``RadixAttention``): no gather runs here, so the
    grader's executor builds the same scenario without radixlab's ``gather_kv``."""
    model = load_tiny(device="cpu")
    c = model.config
    size = 64 * page_size
    req_pool = ReqToTokenPool(4, 64)
    alloc = TokenToKVPoolAllocator(size, page_size)
    pool = MHATokenToKVPool(size, page_size, torch.float32, c.num_key_value_heads, c.head_dim, c.num_hidden_layers)
    pages = alloc.alloc(size)  # give the pages back in a scrambled order: slot numbers mean nothing
    order = list(range(size // page_size))
    random.Random(seed).shuffle(order)
    for p in order:
        alloc.free(pages[p * page_size:(p + 1) * page_size])
    done: dict[str, list[int]] = {}

    def run(row: int, name: str, new: list[int]) -> None:
        have = done.get(name, [])
        last = int(req_pool.req_to_token[row, len(have) - 1]) if have else -1
        req_pool.write(row, len(have), alloc.alloc_extend(len(have), last, len(new)))
        done[name] = have + new

    rows = {"A": req_pool.alloc(), "C": req_pool.alloc(), "B": req_pool.alloc()}
    run(rows["A"], "A", encode(PROMPT_A))
    run(rows["C"], "C", encode(PROMPT_C))
    b = encode(PROMPT_B)
    shared = len(SYSTEM) // page_size * page_size
    req_pool.write(rows["B"], 0, req_pool.row(rows["A"], shared))  # the cached prefix: A's slots
    done["B"] = b[:shared]
    run(rows["B"], "B", b[shared:])
    with torch.no_grad():
        for _ in range(3):
            run(rows["B"], "B", [int(model.forward_dense(torch.tensor(done["B"]))[-1].argmax())])
    for name in ("A", "C", "B"):  # B last: it rewrites A's prefix slots with the same values
        slots = req_pool.req_to_token[rows[name], :len(done[name])]
        for layer, (k, v) in enumerate(_dense_kv(tuple(done[name]))):
            pool.set_kv_buffer(layer, slots, k, v)
    n = len(done["B"])
    next_slots = alloc.alloc_extend(n, int(req_pool.req_to_token[rows["B"], n - 1]), len(NEXT_CHUNK))
    return PoolScenario(page_size, req_pool.req_to_token.clone(), [t.clone() for t in pool.k_buffer],
                        [t.clone() for t in pool.v_buffer], rows, done, shared, next_slots.tolist())


@lru_cache(maxsize=8)
def _dense_kv(tokens: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return load_tiny(device="cpu").dense_kv(torch.tensor(tokens))


def gather_cases(page_size: int = 4, seed: int = 0) -> dict[str, GatherCase]:
    """Questions on one scenario, each with the K/V ``forward_dense`` gives (for tests and the notebook)."""
    s = build_scenario(page_size, seed)

    def case(name: str, req: str, seq_len: int, prefix_len: int = 0) -> GatherCase:
        kv = _dense_kv(tuple(s.tokens[req]))
        return GatherCase(name, s.req_to_token, s.k_buffers, s.v_buffers, s.rows[req], seq_len,
                          [k[:seq_len] for k, _ in kv], [v[:seq_len] for _, v in kv], prefix_len)
    return {
        "A": case("request A", "A", len(s.tokens["A"])),
        "B": case("request B", "B", len(s.tokens["B"]), s.prefix_len_b),
        "C1": case("request C, seq_len 1", "C", 1),
        "B10": case("request B, seq_len 10", "B", 10, min(10, s.prefix_len_b)),
    }


def extend_with(fn: GatherKV, page_size: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Plug ``fn`` into every ``RadixAttention`` of a fresh tiny model and extend B by ``NEXT_CHUNK``
    through (a copy of) the scenario's pool; returns (those logits, forward_dense's for the same tokens).

    An EXTEND, not a DECODE: a lone decode token sees every key, and since K is stored already
    rotated, attention over a shuffled K/V gives the same answer; the causal mask of a chunk does not.
    """
    s = build_scenario(page_size, seed)
    model = load_tiny(device="cpu")
    for layer in model.model.layers:
        layer.self_attn.attn.gather_fn = fn
    c, rows = model.config, s.req_to_token.shape
    req_pool = ReqToTokenPool(rows[0], rows[1])
    req_pool.req_to_token.copy_(s.req_to_token)
    pool = MHATokenToKVPool(len(s.k_buffers[0]), page_size, torch.float32, c.num_key_value_heads, c.head_dim,
                            c.num_hidden_layers)
    for i in range(c.num_hidden_layers):
        pool.k_buffer[i].copy_(s.k_buffers[i])
        pool.v_buffer[i].copy_(s.v_buffers[i])
    tokens, row, chunk = s.tokens["B"], s.rows["B"], encode(NEXT_CHUNK)
    req_pool.req_to_token[row, len(tokens):len(tokens) + len(chunk)] = torch.tensor(s.next_slots_b)
    fb = ForwardBatch.build(ForwardMode.EXTEND, [chunk], [row], [len(tokens)], s.next_slots_b)
    return model.forward(fb, req_pool, pool), model.forward_dense(torch.tensor(tokens + chunk))[len(tokens):]


# -- the spec ---------------------------------------------------------------------------------------

MAX_VALUES = 200_000  # an answer bigger than this comes back as its shape only


def _plain(t: torch.Tensor) -> dict:
    shape = list(t.shape)
    return {"shape": shape, "values": t.detach().float().cpu().tolist() if t.numel() <= MAX_VALUES else None}


def with_stale_tail(req_to_token: torch.Tensor, row: int, seq_len: int, pool_size: int, seed: int) -> torch.Tensor:
    """A copy of ``req_to_token`` whose ``row`` holds stale slots past ``seq_len``, as a reused row does
    (``ReqToTokenPool.free`` does not clear it): an answer that reads past ``seq_len``, or that takes
    the row's non-zero entries, reads another request's K/V."""
    out = req_to_token.clone()
    tail = out.shape[1] - seq_len
    g = torch.Generator().manual_seed(1000 + seed)
    out[row, seq_len:] = torch.randperm(pool_size, generator=g)[:tail] if tail <= pool_size else 1
    return out


def drive(fn: Callable, args: dict) -> dict:
    """Build the case's inputs from the scenario (fresh copies), call ``fn``; its K/V as plain lists."""
    s = build_scenario(args["page_size"], args["seed"])
    if args["kind"] == "extend":
        logits, _ = extend_with(fn, args["page_size"], args["seed"])
        return {"logits": _plain(logits)}
    row = s.rows[args["req"]]
    seq_len = args["seq_len"]
    req_to_token = with_stale_tail(s.req_to_token, row, seq_len, len(s.k_buffers[0]), args["seed"])
    layers = []
    for kb, vb in zip(s.k_buffers, s.v_buffers):
        inputs = (req_to_token.clone(), kb.clone(), vb.clone())
        out = fn(*inputs, row, seq_len)
        if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
            return {"bad_return": type(out).__name__}
        if not all(torch.equal(a, b) for a, b in zip(inputs, (req_to_token, kb, vb))):
            return {"mutated": True}
        layers.append({"k": _plain(out[0]), "v": _plain(out[1])})
    return {"layers": layers}


def _first_bad_position(got: dict, want: dict) -> int | None:
    g, w = torch.tensor(got["values"]), torch.tensor(want["values"])
    bad = (~((g - w).abs() <= 1e-4)).flatten(1).any(dim=1).nonzero()  # written so that NaN counts as wrong
    return int(bad[0]) if len(bad) else None


def compare(got: dict, want: dict, args: dict) -> str | None:
    """The first thing that differs, said so that a student can act on it."""
    if args["kind"] == "extend":
        g, w = torch.tensor(got["logits"]["values"]), torch.tensor(want["logits"]["values"])
        diff = (g - w).abs().max().item() if g.shape == w.shape else float("inf")
        return None if diff <= 1e-4 else (
            f"with your gather_kv inside every RadixAttention layer, an EXTEND of {len(NEXT_CHUNK)} more tokens of "
            f"request B gives logits {diff:.3g} away from forward_dense's")
    call = (f"gather_kv(req_to_token, k_buffer, v_buffer, req_pool_idx={args['row']}, seq_len={args['seq_len']})"
            f" with page_size {args['page_size']}")
    if "bad_return" in got:
        return f"{call} must return a tuple (k, v) of two tensors, got {got['bad_return']}"
    if "mutated" in got:
        return f"{call} changed req_to_token or a buffer: a read must not write"
    for layer, (g, w) in enumerate(zip(got["layers"], want["layers"])):
        for what in ("k", "v"):
            if g[what]["shape"] != w[what]["shape"]:
                return (f"{call} on layer {layer}: {what.upper()} has shape {tuple(g[what]['shape'])}, expected "
                        f"{tuple(w[what]['shape'])} = (seq_len, kv_heads, head_dim). Read positions 0 .. seq_len - 1 "
                        "of the row only: a reused row still holds an earlier request's slots past seq_len")
            p = _first_bad_position(g[what], w[what])
            if p is not None:
                where = " (a cached-prefix token, computed by another request)" if p < args["prefix_len"] else ""
                return (f"{call} on layer {layer}: {what.upper()} of position {p}{where} is not what forward_dense "
                        f"computes for that token. Position p lives in slot req_to_token[req_pool_idx, p].")
    return None if len(got["layers"]) == len(want["layers"]) else "a different number of layers came back"


def cases(seed: int = 0) -> list[GradedCase]:
    """Seed 0: the check cell's. Another seed scrambles the pages differently and picks another seq_len."""
    rng = random.Random(seed)

    def gather(req: str, page_size: int = 4, seq_len: int | None = None) -> dict:
        s = build_scenario(page_size, seed)
        n = len(s.tokens[req]) if seq_len is None else seq_len
        prefix = min(n, s.prefix_len_b) if req == "B" else 0
        return {"kind": "gather", "page_size": page_size, "seed": seed, "req": req, "row": s.rows[req],
                "seq_len": n, "prefix_len": prefix}

    a, b = gather("A"), gather("B")
    part_len = 10 if seed == 0 else rng.randrange(2, b["seq_len"] - 1)
    return [
        GradedCase(f"request A (row {a['row']}, {a['seq_len']} tokens of its own prompt): K and V of every layer", a),
        GradedCase(f"request B (row {b['row']}, {b['prefix_len']} prefix tokens cached by A, {b['seq_len']} in all): "
                   "K and V of every layer", b, weight=2),
        GradedCase("seq_len 1: only C's first token", gather("C", seq_len=1), "boundary"),
        GradedCase(f"seq_len {part_len}: only the first {part_len} tokens of B's row", gather("B", seq_len=part_len),
                   "boundary"),
        GradedCase("page size 1: request B", gather("B", page_size=1), "boundary"),
        GradedCase("page size 16: request B", gather("B", page_size=16), "boundary"),
        GradedCase("inside RadixAttention: B's next chunk through the pool gives forward_dense's logits",
                   {"kind": "extend", "page_size": 4, "seed": seed}, "boundary", weight=2),
    ]


def _reference(*args: Any) -> tuple[torch.Tensor, torch.Tensor]:
    from .answers_kvpool import reference_gather_kv
    return reference_gather_kv(*args)


SPEC = ExerciseSpec(
    id=EXERCISE, title=TITLE, function="gather_kv", check="check_gather_kv",
    reference=_reference, drive=drive, cases=cases, compare=compare,
    forbidden=("reference_gather_kv", "gather_kv"),
    strip=("radixlab.model.layers:gather_kv",),  # absent in the executor (the lead updates dotted names on moves)
    time_limit=60.0)  # the first case of a fresh seed builds its scenario: a few model steps on a busy CPU
SPECS = [SPEC]


def check_gather_kv(fn: GatherKV, *, record: bool = True) -> CheckResult:
    """Check a student's ``gather_kv(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len)`` (exercise 07.1)."""
    return check_exercise(SPEC, fn, record=record)
