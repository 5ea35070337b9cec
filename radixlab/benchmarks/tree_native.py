"""``bench tree``, the C++ lane: SGLang's C++ tree beside radixlab's, by input form and by threads.

``input_forms``: one full hit (and a system-prompt hit) timed interleaved as SGLang's C++ tree gets
it from its caller (a ``RadixKey`` over the request's ``array('q')``), from a plain token list, and
through the bare binding (``tree.match_prefix`` on a list: no ``RadixKey``, no ``MatchResult``),
beside radixlab's fast tree from a list and with its key built. ``thread_scaling``: does a match
release the GIL? N threads each doing matches on the same tree vs one thread, as matches per
second; a control that does release the GIL (``hashlib`` over 256 KiB) shows what this machine
allows. ``gil_probe`` asks the same question without needing a free core: while one call runs,
can another thread run Python at all?
"""

from __future__ import annotations

import gc
import hashlib
import sys
import threading
import time
from typing import Any, Callable, Sequence

from ..sim.workloads import ReferenceTreeWorkload, fresh
from .tree_timing import CPP, Side, interleaved, pc, stats

BINDING = f"{CPP}: the binding alone, a list"
CONTROL = "control: hashlib.sha256 of 256 KiB (releases the GIL)"


def input_forms(cpp: Side, fast: Side, caches: dict[str, Any], wl: ReferenceTreeWorkload, reqs: list[list[int]],
                ops: int) -> dict:
    """{op: {lane: stats}} and ``agree`` for a full hit and a system-prompt hit, every lane interleaved."""
    from array import array

    c, f = caches[CPP], caches[fast.name]
    out: dict = {"ops": {}, "agree": True}
    for op, qs, want in (("full-hit match", [reqs[wl.rng.randrange(len(reqs))] for _ in range(ops)], len(reqs[0])),
                         ("system-prompt hit", [wl.system_hit() for _ in range(ops)], wl.system_len)):
        lanes = [(f"{CPP}: RadixKey over array('q') (its caller)", lambda a: cpp.match_native(c, a),
                  [array("q", q) for q in qs]),
                 (f"{CPP}: RadixKey over a list", lambda a: cpp.match_native(c, a), [fresh(q) for q in qs]),
                 (BINDING, c.tree.match_prefix, [fresh(q) for q in qs]),
                 ("fast: a list", lambda a: fast.match_native(f, a), [fresh(q) for q in qs]),
                 ("fast: key built", lambda k: fast.match(f, k), [fast.key(q) for q in qs])]

        def check(i: int, res: dict) -> None:
            for name, r in res.items():
                n = sum(len(t) for t in r[0]) if name == BINDING else len(r.device_indices)  # the binding: a list
                if n != want:
                    out["agree"] = False
        times, _ = interleaved(lanes, check)
        out["ops"][op] = {name: stats(t) for name, t in times.items()}
    return out


def _control_work() -> Callable[[Any], Any]:
    data = bytes(256 * 1024)
    return lambda _: hashlib.sha256(data).digest()


def thread_scaling(subjects: dict[str, tuple[Callable[[Any], Any], Callable[[int], list]]],
                   threads: Sequence[int] = (1, 2, 4), calls: int = 2000, reps: int = 3) -> dict:
    """{subject: [matches/s per n of ``threads``]} and {subject: [that / the first n's rate]} (lists, so a
    record survives JSON): ``n`` threads, each
    calling ``fn`` on its own ``make(calls)`` inputs, all released at once by a barrier; the rate is
    n x calls over the wall time until the last finishes, best of ``reps`` (subjects and thread
    counts alternate, so a load on the machine falls on all of them). A call that holds the GIL
    stays at about 1x whatever n; one that releases it can reach the free cores."""
    rates: dict[str, dict[int, float]] = {s: {n: 0.0 for n in threads} for s in subjects}
    for rep in range(reps):
        for name, (fn, make) in (subjects.items() if rep % 2 == 0 else reversed(subjects.items())):
            for n in threads:
                inputs = [make(calls) for _ in range(n)]
                barrier = threading.Barrier(n + 1)

                def work(args: list) -> None:
                    barrier.wait()
                    for a in args:
                        fn(a)
                pool = [threading.Thread(target=work, args=(inputs[t],)) for t in range(n)]
                for t in pool:
                    t.start()
                gc.collect()
                gc.disable()
                try:
                    barrier.wait()
                    t0 = pc()
                    for t in pool:
                        t.join()
                    wall = pc() - t0
                finally:
                    gc.enable()
                rates[name][n] = max(rates[name][n], n * calls / (wall / 1e9))
    return {"threads": list(threads), "calls_per_thread": calls,
            "rate_per_s": {s: [r[n] for n in threads] for s, r in rates.items()},
            "scaling": {s: [r[n] / r[threads[0]] for n in threads] for s, r in rates.items()}}


def gil_probe(fn: Callable[[], Any], reps: int = 3) -> dict:
    """Does one call of ``fn()`` let another thread run Python? A ticker thread stamps ``perf_counter_ns``
    in a loop (it must hold the GIL to stamp; it yields it between stamps); this thread makes the call.
    The switch interval (process-wide: every thread's) is raised to 0.25 s meanwhile and restored on
    return, even on an error, so the interpreter never takes the GIL from
    this thread by force during a shorter call: a stamp inside the call can only come from a call
    that let go of the GIL, whatever the load or the number of cores. (Pure Python code shows none
    either: it would hand the GIL over only every switch interval, interleaving threads, never
    running them at once.) Returns {"call_ms": the median call, "ticks_inside": the fewest stamps
    inside a call, of ``reps``}."""
    calls, inside = [], []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(max(interval, 0.25))
    try:
        for _ in range(reps):
            ticks: list[int] = []
            stop, started = threading.Event(), threading.Event()

            def tick() -> None:
                started.set()
                while not stop.is_set():
                    ticks.append(pc())
                    time.sleep(0)  # hand the GIL back: only a call that holds it can keep us out
            ticker = threading.Thread(target=tick)
            ticker.start()
            started.wait()
            t0 = pc()
            fn()
            t1 = pc()
            stop.set()
            ticker.join()
            calls.append((t1 - t0) / 1e6)
            inside.append(sum(1 for t in ticks if t0 < t < t1))
    finally:
        sys.setswitchinterval(interval)
    return {"call_ms": sorted(calls)[len(calls) // 2], "ticks_inside": min(inside)}


def gil_probes(cpp: Side, fast: Side, tokens: int = 100_000, seed: int = 0) -> dict:
    """``gil_probe`` of one long full hit (``tokens`` cached, matched from a list) in SGLang's C++ tree
    (the binding alone, and through its caller from ``array('q')``) and in radixlab's fast tree, and of
    a control that releases the GIL (``hashlib.sha256`` of 16 MiB): {subject: probe}."""
    import random
    from array import array

    import torch

    toks = [random.Random(seed).randrange(32_000) for _ in range(tokens)]
    c, f = cpp.new(), fast.new()
    cpp.insert_native(c, cpp.native(toks), torch.arange(tokens))
    fast.insert_native(f, toks, torch.arange(tokens))
    data = bytes(16 * 1024 * 1024)
    subjects = {f"{CPP}: the binding alone, a list": lambda: c.tree.match_prefix(toks),
                f"{CPP}: RadixKey over array('q') (its caller)": lambda: cpp.match_native(c, array("q", toks)),
                "fast: a list": lambda: fast.match_native(f, toks),
                "control: hashlib.sha256 of 16 MiB": lambda: hashlib.sha256(data).digest()}
    return {name: gil_probe(fn) for name, fn in subjects.items()}


def native_section(cpp: Side, fast: Side, wl: ReferenceTreeWorkload, reqs: list[list[int]], ops: int,
                   threads: Sequence[int] = (1, 2, 4), calls: int = 1000, probe_tokens: int = 100_000) -> dict:
    """The C++ lane's own section: ``input_forms`` on trees holding ``reqs``, ``thread_scaling``
    of full hits from what each tree's request holds (C++: ``array('q')``; radixlab: a list), and
    ``gil_probes`` of one ``probe_tokens``-token full hit."""
    from array import array

    from .tree_timing import build

    caches = {CPP: build(cpp, reqs)[0], fast.name: build(fast, reqs)[0]}
    out = input_forms(cpp, fast, caches, wl, reqs, ops)
    rng = wl.rng

    def picks(k: int) -> list[list[int]]:
        return [reqs[rng.randrange(len(reqs))] for _ in range(k)]
    subjects = {f"{CPP} full hit (array('q'), its caller)":
                (lambda a: cpp.match_native(caches[CPP], a), lambda k: [array("q", q) for q in picks(k)]),
                f"{CPP} full hit, the binding alone (list)":
                (caches[CPP].tree.match_prefix, lambda k: [fresh(q) for q in picks(k)]),
                "fast full hit (list)": (lambda a: fast.match_native(caches[fast.name], a), lambda k: [fresh(q) for q in picks(k)]),
                "fast full hit (key built)": (lambda k: fast.match(caches[fast.name], k), lambda k: [fast.key(q) for q in picks(k)]),
                CONTROL: (_control_work(), lambda k: [None] * k)}
    out["threads"] = thread_scaling(subjects, threads, calls)
    out["gil_probe"] = gil_probes(cpp, fast, probe_tokens)
    return out
