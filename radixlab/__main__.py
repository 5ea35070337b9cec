"""Command line: ``python -m radixlab {demo,doctor,student,bench,grade}``.

Each subcommand lives in its own module and is imported only when used.
"""

from __future__ import annotations

import argparse
import importlib
import sys

BENCHMARKS = {
    # name: (module under radixlab.benchmarks, one-line help)
    "lookup": ("lookup", "hash probe-down vs hash forward walk vs radix match, by prefix length"),
    "evict": ("evict", "SGLang's eviction heap vs an LRU linked list on the same trace (notebook 05)"),
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
    from .course.edition import make_student_edition

    try:
        written = make_student_edition(args.src, args.out)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.name not in BENCHMARKS:
        print(f"error: unknown benchmark {args.name!r}; choose from {', '.join(sorted(BENCHMARKS))}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"radixlab.benchmarks.{BENCHMARKS[args.name][0]}")
    return int(module.main(args.rest) or 0)


def _grade(args: argparse.Namespace) -> int:
    module = importlib.import_module("radixlab.course.grade")
    return int(module.main(args.rest) or 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m radixlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="replay the adv05 seed's run.py walkthrough").set_defaults(fn=_demo)
    sub.add_parser("doctor", help="report Python, torch, device, Graphviz and Jupyter versions").set_defaults(fn=_doctor)
    p = sub.add_parser("student", help="write the student edition of the notebooks")
    p.add_argument("src", help="instructor notebooks: a folder (e.g. notebooks/) or one .ipynb")
    p.add_argument("-o", "--out", required=True, help="output folder (never the instructor folder)")
    p.set_defaults(fn=_student)
    p = sub.add_parser("bench", help="benchmarks that print ratios against their baseline",
                       description="\n".join(f"{k}: {v[1]}" for k, v in BENCHMARKS.items()))
    p.add_argument("name", help=f"one of: {', '.join(sorted(BENCHMARKS))}")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options for the benchmark (see NAME --help)")
    p.set_defaults(fn=_bench)
    p = sub.add_parser("grade", help="grade student submissions (see grade --help)", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(fn=_grade)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
