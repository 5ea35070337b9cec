"""Exercise 04.2: the student writes lesson 4's missing test (a query shorter than the cached path).

The student defines ``test_shorter_query(longest_cached_prefix)``: it calls the function it is given
and raises ``AssertionError`` when that function is wrong. This spec runs the student's test against
implementations it holds: a correct one (the test must pass it) and ones that are wrong in the
blank of exercise 04.1 (the test must fail them). Two of them are wrong *only* when the query is a
proper prefix of a cached path, the case the lesson asks for; the others are the plain rounding
mistakes. None of them is an answer to 04.1 in disguise: the correct one below is the same scan,
but this module is not part of 04.1's executor copy (``ex_prefix`` never imports it), and the check
cell of 04.1 rejects a function taken from here.

All implementations are made by one factory (same name, same code), so a test cannot tell them
apart by name, and the grader's seed draws the order in which a case runs them, so a test that counts
its runs cannot either. What the executor cannot hide is its own process: a test that reads the
implementation's closure or the caller's frame can tell them apart (a known limit; it takes more
knowledge of this module than writing the test does).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
from typing import Any, Callable

from .spec import CheckResult, ExerciseSpec, GradedCase, check_exercise

BUGS = {
    "whole_path": "returns the whole cached path (rounded to pages) when the query is a prefix of it: "
                  "it reads past the end of the query",
    "round_up_partial": "counts the query's half-filled last page as reusable because the cache holds the "
                        "rest of that page",
    "no_rounding": "uses the raw match (`aligned = common`): no rounding down to whole pages",
    "one_page_short": "rounds down one page too many",
}
"""The wrong implementations of 04.1's blank, by what they get wrong."""


def make_implementation(bug: str | None) -> Callable:
    """A ``longest_cached_prefix``: correct for ``bug=None``, else wrong as ``BUGS[bug]`` says."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"bug must be None or one of {sorted(BUGS)}, got {bug!r}")

    def longest_cached_prefix(query_tokens, query_namespace, cached_paths, page_size):
        if page_size <= 0:
            raise ValueError("page_size must be positive")
        best = 0
        for cached_tokens, cached_namespace in cached_paths:
            if cached_namespace != query_namespace:
                continue
            common = 0
            for left, right in zip(query_tokens, cached_tokens):
                if left != right:
                    break
                common += 1
            aligned = common // page_size * page_size
            prefix_of_path = common == len(query_tokens) < len(cached_tokens)
            if bug == "whole_path" and prefix_of_path:
                aligned = len(cached_tokens) // page_size * page_size
            elif bug == "round_up_partial" and prefix_of_path:
                up = -(-common // page_size) * page_size
                aligned = up if up <= len(cached_tokens) else aligned
            elif bug == "no_rounding":
                aligned = common
            elif bug == "one_page_short":
                aligned = max(aligned - page_size, 0)
            best = max(best, aligned)
        return best

    return longest_cached_prefix


def _plain(x: Any) -> Any:
    return x if isinstance(x, (int, str)) and not isinstance(x, bool) else repr(x)[:100]


def run_test(test: Callable, bug: str | None) -> dict:
    """Run ``test`` on one implementation: passed or failed, and the calls it made (plain data).

    ``NotImplementedError`` from the test itself propagates (the blank: "not done yet").
    """
    impl = make_implementation(bug)
    calls: list = []

    def longest_cached_prefix(query_tokens, query_namespace, cached_paths, page_size):
        result = impl(query_tokens, query_namespace, cached_paths, page_size)
        if len(calls) < 20:
            try:
                paths = [[list(t), _plain(n)] for t, n in cached_paths]
                calls.append([list(query_tokens), _plain(query_namespace), paths, _plain(page_size), result])
            except Exception:  # an odd argument: the implementation already took it
                calls.append([repr(query_tokens)[:80], "?", [], _plain(page_size), result])
        return result

    try:
        returned = test(longest_cached_prefix)
    except NotImplementedError:
        raise
    except AssertionError as exc:
        return {"verdict": "failed", "error": f"AssertionError: {exc}"[:300], "calls": calls}
    except Exception as exc:
        return {"verdict": "raised", "error": f"{type(exc).__name__}: {exc}"[:300], "calls": calls}
    return {"verdict": "passed", "calls": calls, "returned": None if returned is None else repr(returned)[:100]}


def isolate() -> bool:
    """Fork for each run, except in a live IPython kernel (forking a kernel with its threads is unsafe)."""
    ipython = sys.modules.get("IPython")
    return hasattr(os, "fork") and not (ipython is not None and ipython.get_ipython() is not None)


def run_test_isolated(test: Callable, bug: str | None) -> dict:
    """``run_test`` in a forked child, outside a Jupyter kernel (the grader's executor): whatever the
    test remembers from one run (a counter, a list) is gone at the next, so it cannot count its way to
    telling the implementations apart. In a kernel (the check cell) it runs in place."""
    if not isolate():
        return run_test(test, bug)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run once, report, leave without cleanup of the parent's state
        os.close(read_end)
        try:
            try:
                result = run_test(test, bug)
            except NotImplementedError:
                result = {"not_done": True}
            except BaseException as exc:  # noqa: BLE001  SystemExit and the like: a failed run
                result = {"verdict": "raised", "error": f"{type(exc).__name__}: {exc}"[:300], "calls": []}
            os.write(write_end, json.dumps(result, default=repr).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    try:
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
    finally:  # a timeout in the parent (the case's alarm) must not leave the child running
        os.close(read_end)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    try:
        result = json.loads(b"".join(chunks) or b"null")
    except ValueError:
        result = None
    if not isinstance(result, dict):
        return {"verdict": "raised", "error": "your test ended its process", "calls": []}
    if result.get("not_done"):
        raise NotImplementedError()
    return result


def shorter_calls(calls: list) -> list:
    """The calls whose query is shorter than a cached path of its namespace that it shares a token with."""
    out = []
    for q, ns, paths, p, _ in calls:
        if isinstance(q, list) and any(n == ns and len(q) < len(t) and q[:1] == t[:1] and q for t, n in paths):
            out.append([q, ns, p])
    return out


def drive(fn: Callable, args: dict) -> Any:
    """Run the student's test on the correct implementation, and on ``args['bug']`` if there is one,
    in the case's order (drawn from the grader's seed: a test that counts its runs cannot tell which is which)."""
    got = {}
    for which in args.get("order", ["correct", "wrong"]):
        if which == "correct" or args.get("bug"):
            got[which] = run_test_isolated(fn, None if which == "correct" else args["bug"])
    return got


def _call_text(call: list) -> str:
    q, ns, paths, p, result = call
    return f"longest_cached_prefix({q}, {ns!r}, {paths}, {p}) → {result}"


def compare(got: Any, want: Any, args: dict) -> str | None:
    """What the student's test did, against what the case asks of it (``want`` is not needed)."""
    correct = got["correct"]
    if not correct["calls"]:
        return ("your test never calls the `longest_cached_prefix` it was given (its argument): a test that "
                "calls nothing, or calls the notebook's own function by its global name, tests nothing")
    if correct["verdict"] != "passed":
        last = _call_text(correct["calls"][-1])
        return (f"your test fails a correct implementation ({correct['error']}); its last call: {last}. "
                "Check the number your test expects")
    if args["need"] == "shorter":
        if shorter_calls(correct["calls"]):
            return None
        return ("none of your test's calls asks about a query shorter than a cached path of its namespace "
                "(the case the lesson asks for: the query ends inside a cached path)")
    if args["need"] == "pass":
        return None
    wrong = got["wrong"]
    if wrong["verdict"] != "passed":
        return None
    answers = "; ".join(_call_text(c) for c in wrong["calls"][:3])
    hint = ""
    if wrong.get("returned") == "False":
        hint = " Your test *returned* False instead of failing: use `assert`."
    return f"your test passes an implementation that {BUGS[args['bug']]} (it answered: {answers}).{hint}"


def cases(seed: int = 0) -> list[GradedCase]:
    """The student's test brings its own data (no table to copy); a grader seed draws the order in which
    each case runs the correct and the wrong implementation."""
    rng = random.Random(seed)

    def catch(bug: str) -> dict:
        order = ["correct", "wrong"] if seed == 0 else rng.sample(["correct", "wrong"], 2)
        return {"need": "catch", "bug": bug, "order": order}

    return [
        GradedCase("your test passes a correct longest_cached_prefix", {"need": "pass"}, weight=0.5),
        GradedCase("your test asks about a query shorter than a cached path", {"need": "shorter"}, weight=0.5),
        GradedCase("your test fails an implementation that reads past the end of a short query",
                   catch("whole_path")),
        GradedCase("your test fails one that counts the query's half-filled last page",
                   catch("round_up_partial"), "boundary", weight=0.5),
        GradedCase("your test fails one that does not round down to whole pages",
                   catch("no_rounding"), "boundary", weight=0.5),
    ]


def _reference(implementation: Any) -> Any:
    from .answers_prefix import reference_test_shorter_query
    return reference_test_shorter_query(implementation)


SPEC = ExerciseSpec(
    id="04.2", title="test_shorter_query", function="test_shorter_query", check="check_shorter_query_test",
    reference=_reference, drive=drive, cases=cases, compare=compare,
    forbidden=("reference_test_shorter_query",))
SPECS = [SPEC]


def check_shorter_query_test(fn: Callable, record: bool = True) -> CheckResult:
    """Grade exercise 04.2: the student's test passes a correct implementation and fails wrong ones."""
    return check_exercise(SPEC, fn, record=record)
