"""Exercise 07.1 (notebook 07_kv_memory_pool): write the gather that builds a request's K/V from its row.

The student writes ``gather_kv(req_to_token, k_buffer, v_buffer, req_pool_idx, seq_len) -> (k, v)``:
the K and V of the request's tokens ``0 .. seq_len - 1``, in position order, each
``[seq_len, kv_heads, head_dim]``. Position ``p`` of the request lives in KV slot
``req_to_token[req_pool_idx, p]`` — its cached prefix included, whichever request computed it. This
is the read half of ``RadixAttention`` (``radixlab.model.layers.gather_kv``).

The check serves real requests with the tiny model through a real pool (pages handed out in a
scrambled order, so a slot number says nothing about a position; request B reuses request A's cached
prefix pages and sits in row 2) and compares the student's K/V with the K/V that ``forward_dense``
computes for the same tokens. Every input and expected output is a plain tensor or int
(``GatherCase``), so the check can run in a process the student's code never touched. It catches
the plausible wrong answers: the slot used as the position, the prefix forgotten, ``seq_len`` off by
one, the wrong row, slots sorted out of position order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import torch

from ..memory import MHATokenToKVPool, ReqToTokenPool, TokenToKVPoolAllocator
from ..model.forward_batch import ForwardBatch, ForwardMode
from ..model.layers import gather_kv as model_gather_kv
from ..model.loader import load_tiny
from ..tokenizer import encode
from .check import Case, CheckResult, own_code, run_check

EXERCISE = "07.1"
TITLE = "gather_kv"

GatherKV = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int, int], tuple[torch.Tensor, torch.Tensor]]

SYSTEM = "You are a terse assistant. "
PROMPT_A = SYSTEM + "Hi!"
PROMPT_B = SYSTEM + "What is 2+2?"
PROMPT_C = "Hey"
NEXT_CHUNK = " And 3+3?"


def reference_gather_kv(req_to_token: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor,
                        req_pool_idx: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The instructor solution: read the row, then the slots' rows of the buffers."""
    slots = req_to_token[req_pool_idx, :seq_len]
    return k_buffer[slots], v_buffer[slots]


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
    it) with the tiny model on the CPU; B then decodes 3 greedy tokens."""
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

    def run(mode: ForwardMode, row: int, name: str, new: list[int]) -> torch.Tensor:
        have = done.get(name, [])
        last = int(req_pool.req_to_token[row, len(have) - 1]) if have else -1
        slots = alloc.alloc_extend(len(have), last, len(new))
        req_pool.write(row, len(have), slots)
        fb = ForwardBatch.build(mode, [new], [row], [len(have)], slots)
        done[name] = have + new
        return model.forward(fb, req_pool, pool)

    rows = {"A": req_pool.alloc(), "C": req_pool.alloc(), "B": req_pool.alloc()}
    run(ForwardMode.EXTEND, rows["A"], "A", encode(PROMPT_A))
    run(ForwardMode.EXTEND, rows["C"], "C", encode(PROMPT_C))
    b = encode(PROMPT_B)
    shared = len(SYSTEM) // page_size * page_size
    req_pool.write(rows["B"], 0, req_pool.row(rows["A"], shared))  # the cached prefix: A's slots
    done["B"] = b[:shared]
    logits = run(ForwardMode.EXTEND, rows["B"], "B", b[shared:])
    for _ in range(3):
        logits = run(ForwardMode.DECODE, rows["B"], "B", [int(logits[-1].argmax())])
    n = len(done["B"])
    next_slots = alloc.alloc_extend(n, int(req_pool.req_to_token[rows["B"], n - 1]), len(NEXT_CHUNK))
    return PoolScenario(page_size, req_pool.req_to_token.clone(), [t.clone() for t in pool.k_buffer],
                        [t.clone() for t in pool.v_buffer], rows, done, shared, next_slots.tolist())


@lru_cache(maxsize=8)
def _dense_kv(tokens: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return load_tiny(device="cpu").dense_kv(torch.tensor(tokens))


def gather_cases(page_size: int = 4) -> dict[str, GatherCase]:
    """The check's questions for one page size, each with the K/V ``forward_dense`` gives."""
    s = build_scenario(page_size)

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


def compare(fn: GatherKV, case: GatherCase) -> None:
    """Run the student's gather on copies of the case's tensors, assert it gives forward_dense's K/V."""
    call = f"gather_kv(req_to_token, k_buffer, v_buffer, req_pool_idx={case.req_pool_idx}, seq_len={case.seq_len})"
    for layer, (kb, vb) in enumerate(zip(case.k_buffers, case.v_buffers)):
        out = fn(case.req_to_token.clone(), kb.clone(), vb.clone(), case.req_pool_idx, case.seq_len)
        if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
            raise AssertionError(f"{call} must return a tuple (k, v) of two tensors, got {type(out).__name__}")
        for what, got, want in (("K", out[0], case.want_k[layer]), ("V", out[1], case.want_v[layer])):
            if tuple(got.shape) != tuple(want.shape):
                raise AssertionError(f"{call} on layer {layer}: {what} has shape {tuple(got.shape)}, expected "
                                     f"{tuple(want.shape)} = (seq_len, kv_heads, head_dim)")
            bad = ((got.float() - want).abs().amax(dim=(1, 2)) > 1e-4).nonzero()
            if len(bad):
                p = int(bad[0])
                where = " (a cached-prefix token, computed by another request)" if p < case.prefix_len else ""
                raise AssertionError(f"{call} on layer {layer}: {what} of position {p}{where} is not what "
                                     f"forward_dense computes for that token. Position p lives in slot "
                                     f"req_to_token[req_pool_idx, p].")


def _unchanged(fn: GatherKV) -> None:
    s = build_scenario(4)
    row, k, v = s.req_to_token.clone(), s.k_buffers[0].clone(), s.v_buffers[0].clone()
    fn(row, k, v, s.rows["B"], len(s.tokens["B"]))
    if not (torch.equal(row, s.req_to_token) and torch.equal(k, s.k_buffers[0]) and torch.equal(v, s.v_buffers[0])):
        raise AssertionError("gather_kv changed req_to_token or a buffer: a read must not write")


def extend_with(fn: GatherKV, page_size: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Plug ``fn`` into every ``RadixAttention`` of a fresh tiny model and extend B by ``NEXT_CHUNK``
    through the pool; returns (those logits, forward_dense's logits for the same tokens).

    An EXTEND, not a DECODE: a lone decode token sees every key, and since K is stored already
    rotated, attention over a shuffled K/V gives the same answer; the causal mask of a chunk does not.
    """
    s = build_scenario(page_size)
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
    tokens, row = s.tokens["B"], s.rows["B"]
    chunk = encode(NEXT_CHUNK)
    req_pool.req_to_token[row, len(tokens):len(tokens) + len(chunk)] = torch.tensor(s.next_slots_b)
    fb = ForwardBatch.build(ForwardMode.EXTEND, [chunk], [row], [len(tokens)], s.next_slots_b)
    return model.forward(fb, req_pool, pool), model.forward_dense(torch.tensor(tokens + chunk))[len(tokens):]


def _extend_matches(fn: GatherKV) -> None:
    got, want = extend_with(fn)
    diff = (got - want).abs().max().item()
    if diff > 1e-4:
        raise AssertionError(f"with your gather_kv inside RadixAttention, the logits of B's next {len(NEXT_CHUNK)} "
                             f"tokens differ from "
                             f"forward_dense's by {diff:.3g}")


def check_gather_kv(fn: GatherKV, record: bool = True) -> CheckResult:
    """Grade exercise 07.1 (4 points): A and B (main 2), edge cases (1, hidden), inside RadixAttention (1)."""
    fn = own_code(fn, "gather_kv", reference_gather_kv, model_gather_kv)
    cases4 = gather_cases(4)
    b = cases4["B"]
    cases = [
        Case(f"request A (row {cases4['A'].req_pool_idx}, {cases4['A'].seq_len} tokens of its own prompt): "
             "K and V of every layer", lambda: compare(fn, cases4["A"]), 1.0),
        Case(f"request B (row {b.req_pool_idx}, {b.prefix_len} prefix tokens cached by A, then its own, "
             f"{b.seq_len} in all): K and V of every layer", lambda: compare(fn, b), 1.0),
        Case("seq_len 1 (C's first token); seq_len 10 (only the first 10 of B's row)",
             lambda: (compare(fn, cases4["C1"]), compare(fn, cases4["B10"])), 0.25, hidden=True),
        Case("page size 1: request B", lambda: compare(fn, gather_cases(1)["B"]), 0.25, hidden=True),
        Case("page size 16: request B", lambda: compare(fn, gather_cases(16)["B"]), 0.25, hidden=True),
        Case("a read changes nothing", lambda: (compare(fn, cases4["A"]), _unchanged(fn)), 0.25, hidden=True),
        Case("inside RadixAttention: B's next chunk through the pool gives forward_dense's logits",
             lambda: _extend_matches(fn), 1.0, hidden=True, part="mapping"),
    ]
    return run_check(EXERCISE, TITLE, cases, record=record)
