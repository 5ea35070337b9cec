"""``bench tree``, the C++ lane: SGLang's C++ tree beside radixlab's, by input form and by threads.

``input_forms``: one full hit (and a system-prompt hit) timed interleaved as SGLang's C++ tree gets
it from its caller (a ``RadixKey`` over the request's ``array('q')``), from a plain token list, and
through the bare binding (``tree.match_prefix`` on a list: no ``RadixKey``, no ``MatchResult``),
beside radixlab's fast tree from a list and with its key built. ``thread_scaling``: does a match
release the GIL? N threads each doing matches on the same tree vs one thread, as matches per
second; a control that does release the GIL (``hashlib`` over 256 KiB) shows what this machine
allows.
"""

from __future__ import annotations

import gc
import hashlib
import threading
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


def native_section(cpp: Side, fast: Side, wl: ReferenceTreeWorkload, reqs: list[list[int]], ops: int,
                   threads: Sequence[int] = (1, 2, 4), calls: int = 1000) -> dict:
    """The C++ lane's own section: ``input_forms`` on trees holding ``reqs``, then ``thread_scaling``
    of full hits from what each tree's request holds (C++: ``array('q')``; radixlab: a list)."""
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
    return out
