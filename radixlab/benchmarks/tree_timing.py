"""``bench tree``, timing: one adapter per cache (``Side``) and the interleaved timing loop.

Every timed op is one call between two ``perf_counter_ns`` reads, the lanes interleaved (A, B, C
then C, B, A) on the same inputs, gc off while timing. Minor page faults are read with the
Unix-only ``resource`` module, imported when first needed; where it is missing (Windows) the
fault count is reported as 0 and everything else runs.
"""

from __future__ import annotations

import gc
import math
import time

import torch
from array import array
from collections import deque
from typing import Any, Callable, Sequence

from ..mem_cache import FastRadixCache, RadixCache, RadixKey


HUGE = 10**12


pc = time.perf_counter_ns


class Side:
    """How to drive one cache: build keys, match, insert, evict (``native`` = from what its request holds)."""

    def __init__(self, name: str, new: Callable[[], Any], key: Callable, native: Callable,
                 match: Callable, match_native: Callable, insert: Callable, insert_native: Callable,
                 evict_all: Callable, hit_len: Callable) -> None:
        self.name, self.new, self.key, self.native = name, new, key, native
        self.match, self.match_native, self.insert, self.insert_native = match, match_native, insert, insert_native
        self.evict_all, self.hit_len = evict_all, hit_len


CACHES = {"fast": FastRadixCache, "readable": RadixCache}
"""radixlab's two trees by the name a record gives them: the packed-bytes walk and the readable one."""


def radixlab_side(matcher: str) -> Side:
    def key(toks: list[int]) -> RadixKey:
        k = RadixKey(toks)
        if matcher == "readable":
            _ = k.units  # the readable walk's form (tuples of ints), made when the key is built
        return k

    return Side(matcher, CACHES[matcher], key, lambda toks: toks,
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


CPP = "sglang-cpp"
"""The record's name for SGLang's experimental C++ tree, driven through its real caller ``RadixCacheCpp``."""


def sglang_cpp_side(build: bool = True) -> Side | str:
    """SGLang 0.5.17's C++ tree behind ``RadixCacheCpp`` (``radixlab.sglang_cpp``), fed what its caller
    feeds it: a ``RadixKey`` over the request's ``array('q')``, whose ids the binding converts to a
    ``std::vector<int32>`` on every match and insert (there is no key to build once). Its ``insert``
    is ``cache_finished_req``'s ``_insert``. Returns the reason instead when it cannot be loaded."""
    from .. import sglang_cpp

    try:
        mod = sglang_cpp.load_cache(build=build)
    except sglang_cpp.CppTreeUnavailable as exc:
        return str(exc)
    RK, MP, EP = mod.RadixKey, mod.MatchPrefixParams, mod.EvictParams
    return Side(CPP, sglang_cpp.new_cache, lambda toks: RK(array("q", toks)), lambda toks: array("q", toks),
                lambda c, k: c.match_prefix(MP(key=k)), lambda c, arr: c.match_prefix(MP(key=RK(arr))),
                lambda c, k, v: c._insert(k, v), lambda c, arr, v: c._insert(RK(arr), v),
                lambda c: c.evict(EP(num_tokens=HUGE)).num_tokens_evicted, lambda r: len(r.device_indices))


def stats(ns: Sequence[float]) -> dict:
    s = sorted(ns)
    n = len(s)
    med = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return {"n": n, "median_us": med / 1e3, "p90_us": s[min(n - 1, math.ceil(0.9 * n) - 1)] / 1e3}


IN_FLIGHT = 64
"""Results each lane keeps alive while it is timed: the ``prefix_indices`` of requests in flight."""


def minor_faults() -> int:
    """The process's minor page faults so far (``resource.getrusage``), or 0 where the Unix-only
    ``resource`` module is missing (Windows): the timings stay right, the fault column reads 0."""
    try:
        import resource
    except ImportError:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


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
    faults = minor_faults()  # (taken again after the warm-up)
    try:
        for i in range(n):
            if i == warm:
                faults = minor_faults()
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
        faults = minor_faults() - faults
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
