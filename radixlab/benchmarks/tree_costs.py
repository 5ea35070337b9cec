"""``bench tree``, sections 3-5: the compare by edge length, token-list conversion, the tree's
memory per cached token (beside the KV bytes those tokens occupy), and the tree's share of a
serving loop's time.
"""

from __future__ import annotations

import gc
import statistics
import struct
import timeit
import tracemalloc
from array import array
from typing import Any, Callable, Sequence

import torch

from ..mem_cache import RadixCache, RadixKey
from ..mem_cache.radix_key import pack_tokens
from ..sim.workloads import fresh
from .tree_timing import CACHES, pc


# KV bytes per token: 2 (K and V) x layers x KV heads x head_dim x 2 bytes (fp16/bf16)
KV_MODELS = {"SmolLM2-135M (30 layers, 3 KV heads x 64)": 2 * 30 * 3 * 64 * 2,
             "Llama-2-7B (32 layers, 32 KV heads x 128)": 2 * 32 * 32 * 128 * 2}


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


def tree_memory(reqs: list[list[int]], matcher: str = "fast") -> dict:
    """Bytes of the tree per cached token: Python objects (tracemalloc) + index tensors (storage bytes)."""
    keys = [RadixKey(t) for t in reqs]
    vals = [torch.arange(i * len(t), (i + 1) * len(t)) for i, t in enumerate(reqs)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cache = CACHES[matcher]()
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
