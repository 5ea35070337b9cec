"""``python -m radixlab bench tree``: the radix tree's cost per op, fast vs readable matcher vs SGLang.

Notebook 11_performance_boundaries plots these numbers. Every timed op is one call between two
``perf_counter_ns`` reads, the lanes interleaved (A, B, C then C, B, A) on the same inputs, gc off
while timing; medians and p90s, ratios from the same run. Sections:

1. the reference workload (``sim.workloads.ReferenceTreeWorkload``: 100 system prompts x 50 turns):
   full-hit match, system-prompt hit, miss, insert, each with the key built beforehand and from
   a plain token list (SGLang handed the ``array('q')`` its ``Req`` holds), evict-everything and
   build time; SGLang 0.5.17's own RadixCache joins when its wheel is cached (``fetch-sglang``), and
   so does its experimental C++ tree (``sglang-cpp``, built once from the wheel by ``radixlab.sglang_cpp``;
   skipped, saying how to enable it, without a compiler or ninja).
   Floor lanes run in the same interleaved loops (``FLOOR_*``: the C-level work of a full hit and
   of an insert, a bare Python walk and insert, packing a list), and ``standing`` reads the fast
   tree against the floor under each op;
2. growing trees (1k -> 10k nodes by default, 100k with ``--big``): per-op cost vs tree size;
3. the compare itself vs edge length (bytes / array('q') / tuple), and what converting a token
   list costs (the floor for a tree in C++/Rust fed Python lists);
4. memory: bytes per cached token of the tree (tracemalloc for Python objects,
   ``untyped_storage().nbytes()`` for index tensors) vs the KV bytes those tokens occupy.

5. the C++ lane (``tree_native``): the C++ tree by input form, N threads matching vs one (does
   the binding release the GIL?), for it and for radixlab's fast tree, and a GIL probe that needs
   no free core (another thread's clock stamps during one long call).

The fast tree's figures are read against its floors and against SGLang's trees (``standing``);
issue 11's targets are retired. The measuring lives in ``tree_timing`` (sides, the interleaved loop), ``tree_ops`` (sections 1-2)
and ``tree_costs`` (3-5), the printout in ``tree_report``; this module runs them and holds the CLI.
Runs on Windows too (no page-fault counts there: ``tree_timing.minor_faults``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Sequence

import torch

from ..sim.workloads import ReferenceTreeWorkload
from .tree_costs import (KV_MODELS, bottleneck_rate, compare_costs, conversion_costs, engine_cache_share,  # noqa: F401
                         path_memo_cost, tree_memory, yardstick)
from .tree_ops import (FLOOR_BARE_INSERT, FLOOR_BARE_MATCH, FLOOR_BARE_WALK, FLOOR_CAT, FLOOR_INSERT,  # noqa: F401
                       FLOOR_MATCH, FLOOR_PACK, SKIPPED_COPY, _bare_insert, _bare_match, _floor_lanes,
                       _insert_c_work, _insert_floor_lanes, _match_c_work, _rotated, by_key_length,
                       evict_and_build, growth, op_table, pack_floor)
from .tree_report import (FLOOR_OPS, LADDERS, floor_ratios, format_ladders, format_record,  # noqa: F401
                          ratio_rows, skipped_copy)
from .tree_native import BINDING, CONTROL, gil_probe, gil_probes, input_forms, native_section, thread_scaling  # noqa: F401
from .tree_report import STANDING, format_native, format_standing, packing_us, standing  # noqa: F401
from .tree_timing import (CPP, HUGE, IN_FLIGHT, Side, build, interleaved, minor_faults, radixlab_side, sglang_cpp_side,  # noqa: F401
                          sglang_side, stats)

RECORD = Path(__file__).parent / "records" / "tree.json"


def run(prompts: int = 100, turns: int = 50, ops: int = 1000, evict_reps: int = 3,
        growth_sizes: Sequence[int] = (1000, 10000), growth_ops: int = 300, use_sglang: bool = True,
        seed: int = 0, progress: bool = True, timeit_number: int = 200, use_cpp: bool = True,
        threads: Sequence[int] = (1, 2, 4), thread_calls: int = 1000) -> dict:
    """Everything ``bench tree`` measures, as one JSON-able record."""
    say = (lambda *a: print(*a, file=sys.stderr, flush=True)) if progress else (lambda *a: None)
    sides = [radixlab_side("fast"), radixlab_side("readable")]
    sg = sglang_side() if use_sglang else None
    if sg is not None:
        sides.append(sg)
    cpp, cpp_skipped = None, None if use_cpp else "left out (--no-cpp)"
    if use_cpp:
        from .. import sglang_cpp

        if sglang_cpp.unavailable_reason(build=False):
            say("building SGLang's C++ radix tree once into the course cache (about 2 minutes on 2 cores)")
        made = sglang_cpp_side(build=True)
        cpp, cpp_skipped = (made, None) if isinstance(made, Side) else (None, made)
        if cpp is not None:
            sides.append(cpp)
        else:
            say(f"SGLang's C++ tree skipped: {cpp_skipped}")
    from .. import sglang_ref

    rec: dict = {"env": {"python": sys.version.split()[0], "torch": torch.__version__, "platform": platform.platform(),
                         "cpus": os.cpu_count(), "loadavg_start": _loadavg(),
                         "sides": [s.name for s in sides], "sglang": sglang_ref.SGLANG_VERSION if sg else None,
                         "cpp_skipped": cpp_skipped,
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
    if cpp is not None:
        say("the C++ lane: input forms and threads")
        rec["native"] = native_section(cpp, sides[0], wl, reqs, ops, threads, thread_calls)
    say("memory")
    rec["memory"] = [tree_memory(reqs, "fast"), tree_memory(reqs[: max(1, len(reqs) // 5)], "readable")]
    del reqs
    gc.collect()
    say("compare and conversion by length")
    rec["compare_ns"] = compare_costs(number=timeit_number)
    rec["conversion_ns"] = conversion_costs(number=max(1, timeit_number // 2))
    rec["growth"] = growth(sides, growth_sizes, growth_ops, seed=seed, progress=lambda s: say(f"growth {s} nodes done"))
    rec["env"]["loadavg_end"] = _loadavg()
    rec["env"]["wall_s"] = time.perf_counter() - t0
    return rec


def load_record(path: str | Path | None = None) -> dict:
    """The saved record: a quiet machine's full run with the 100,000-node tree (``bench tree --big --save`` writes it)."""
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
    ap.add_argument("--no-cpp", action="store_true", help="leave SGLang's C++ tree out (else built once, ~2 min)")
    ap.add_argument("--threads", default="1,2,4", help="thread counts of the GIL test (the first is the baseline)")
    ap.add_argument("--thread-calls", type=int, default=1000, help="matches per thread in the GIL test")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="write the record here")
    ap.add_argument("--save", action="store_true", help=f"write the saved record ({RECORD.name}; run it with --big on a quiet machine)")
    args = ap.parse_args(argv)
    for name in ("prompts", "turns", "ops", "evict_reps", "growth_ops", "thread_calls"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    sizes = [int(s) for s in args.growth.split(",") if s.strip()] + ([100_000] if args.big else [])
    try:
        threads = [int(n) for n in args.threads.split(",") if n.strip()]
    except ValueError:
        ap.error(f"--threads must be comma-separated counts, got {args.threads!r}")
    if not threads or min(threads) < 1:
        ap.error(f"--threads must be counts >= 1, got {args.threads!r}")
    rec = run(args.prompts, args.turns, args.ops, args.evict_reps, sizes, args.growth_ops, not args.no_sglang, args.seed,
              use_cpp=not args.no_cpp, threads=threads, thread_calls=args.thread_calls)
    print(format_record(rec))
    for path in [args.json] + ([RECORD] if args.save else []):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(rec, indent=1))
            print(f"wrote {path}")
    native_ok = rec.get("native", {}).get("agree", True)
    return 0 if rec["reference"]["agree"] and all(g["agree"] for g in rec["growth"]) and native_ok else 1


def _loadavg() -> tuple[float, float, float] | None:
    """The 1/5/15-minute load averages, or None where the OS has none (Windows)."""
    return os.getloadavg() if hasattr(os, "getloadavg") else None
