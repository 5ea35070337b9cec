"""Exercise 04.2: the student writes lesson 4's missing test (a query shorter than the cached path).

The student defines ``test_shorter_query(longest_cached_prefix)``: it calls the function it is given
and raises ``AssertionError`` when that function is wrong. This spec runs the student's test against
implementations it holds: a correct one (the test must pass it) and ones that are wrong in the
blank of exercise 04.1 (the test must fail them). Two of them are wrong *only* when the query is a
proper prefix of a cached path, the case the lesson asks for; the others are the plain rounding
mistakes. None of them is an answer to 04.1 in disguise: the correct one below is the same scan,
but this module is not part of 04.1's executor copy (``ex_prefix`` never imports it), and the check
cell of 04.1 rejects a function taken from here.

The function the test is given holds no implementation: each call is a question that ``oracle``
answers where the test cannot look (``runs.py``: in the grader's process; in the check cell, the
kernel's). The implementations are stripped from the executor's copy, each run of the test is its
own fresh process, in an order drawn afresh, so a run can tell which implementation it tests only
by the answers to its calls; and a wrong implementation counts as caught only when the test failed
it after a call whose answer a correct implementation would not give (the oracle's record says so).
"""

from __future__ import annotations

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


# -- where the implementations live: the oracle (the grader's process; the check cell's kernel) -----

RUNS = ("correct",) + tuple(BUGS)
MAX_TOKENS = 200_000  # tokens one call may hold (the grader computes every answer itself)


def _answer(bug: str | None, call: list) -> list:
    try:
        return ["value", make_implementation(bug)(*call)]
    except Exception as exc:  # noqa: BLE001  what the implementation raises, the test sees
        return ["raised", type(exc).__name__, str(exc)[:200]]


def oracle(run: str, question: Any) -> tuple[dict, dict]:
    """Answer one call of the student's test as implementation ``run`` does: (the reply the test sees,
    the record the grader keeps). Every implementation answers every call (the same work whatever
    ``run`` is); the record says whether this run's answer is one a correct implementation would not give."""
    q, ns, paths, p = question
    if not isinstance(q, list) or not isinstance(paths, list) or \
            not all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], list) for x in paths):
        raise TypeError("not a call of longest_cached_prefix")
    if len(q) + sum(len(t) for t, _ in paths) > MAX_TOKENS:
        return ({"raised": "ValueError", "message": f"a call of more than {MAX_TOKENS} tokens is not answered"},
                {"text": "(a call too large)", "shorter": False, "differs": False})
    answers = {name: _answer(None if name == "correct" else name, question) for name in RUNS}
    got = answers[run]
    result = got[1] if got[0] == "value" else f"raises {got[1]}"
    record = {"text": f"longest_cached_prefix({q}, {ns!r}, {paths}, {p}) → {result}"[:300],
              "shorter": bool(q) and any(n == ns and len(q) < len(t) and q == t[:len(q)] for t, n in paths),
              "differs": got != answers["correct"]}
    reply = {"value": got[1]} if got[0] == "value" else {"raised": got[1], "message": got[2]}
    return reply, record


# -- what runs beside the student's test: a function that only asks ----------------------------------

_ERRORS = {"ValueError": ValueError, "TypeError": TypeError, "ZeroDivisionError": ZeroDivisionError,
           "IndexError": IndexError, "KeyError": KeyError}


def _plain(x: Any) -> Any:
    return x if x is None or isinstance(x, (bool, int, float, str)) else {"repr": repr(x)[:200]}


def drive(test: Callable, args: Any, ask: Callable[[Any], Any]) -> dict:
    """One run: the student's test on a ``longest_cached_prefix`` whose every call is a question
    ``ask`` sends to the oracle (no implementation is here); the test's verdict as plain data.
    ``NotImplementedError`` from the test itself propagates (the blank: "not done yet")."""
    def longest_cached_prefix(query_tokens, query_namespace, cached_paths, page_size):
        question = [[_plain(t) for t in query_tokens], _plain(query_namespace),
                    [[[_plain(t) for t in tokens], _plain(ns)] for tokens, ns in cached_paths], _plain(page_size)]
        reply = ask(question)
        if not isinstance(reply, dict) or not ("value" in reply or "raised" in reply):
            raise RuntimeError("the grader did not answer this call")
        if "raised" in reply:
            raise _ERRORS.get(reply["raised"], RuntimeError)(reply.get("message", ""))
        return reply["value"]

    try:
        returned = test(longest_cached_prefix)
    except NotImplementedError:
        raise
    except AssertionError as exc:
        return {"verdict": "failed", "error": f"AssertionError: {exc}"[:300]}
    except Exception as exc:
        return {"verdict": "raised", "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"verdict": "passed", "returned": None if returned is None else repr(returned)[:100]}


def compare(got: Any, want: Any, args: dict) -> str | None:
    """What the student's test did in each run (``runs.REPEAT`` per implementation), against what the
    case asks of it (``want`` is not needed). ``calls`` are the oracle's records, made where the test
    cannot write; every run must agree."""
    correct = next((r for r in got["correct"] if not r["calls"] or r["verdict"] != "passed"), got["correct"][0])
    if not correct["calls"]:
        return ("your test never calls the `longest_cached_prefix` it was given (its argument): a test that "
                "calls nothing, or calls the notebook's own function by its global name, tests nothing")
    if correct["verdict"] != "passed":
        return (f"your test fails a correct implementation ({correct['error']}); its last call: "
                f"{correct['calls'][-1]['text']}. Check the number your test expects")
    if args["need"] == "shorter":
        if all(any(c["shorter"] for c in r["calls"]) for r in got["correct"]):
            return None
        return ("none of your test's calls asks about a query shorter than a cached path of its namespace "
                "(the case the lesson asks for: the query ends inside a cached path)")
    if args["need"] == "pass":
        return None
    bug = args["bug"]
    for wrong in got[bug]:
        caught = [c for c in wrong["calls"] if c["differs"]]
        if wrong["verdict"] != "passed" and caught:
            continue
        if wrong["verdict"] != "passed":
            return (f"your test fails an implementation that {BUGS[bug]}, but no call it made got an answer that "
                    f"a correct implementation would not give: it failed for another reason ({wrong['error']}), "
                    "not because of an answer it checked")
        answers = "; ".join(c["text"] for c in (caught or wrong["calls"])[:3])
        hint = " Your test *returned* False instead of failing: use `assert`." if wrong["returned"] == "False" else ""
        return f"your test passes an implementation that {BUGS[bug]} (it answered: {answers}).{hint}"
    return None


def cases(seed: int = 0) -> list[GradedCase]:
    """The student's test brings its own data (no table to copy): the cases say which implementations
    it must pass and fail (``runs``), the same for every seed."""
    def catch(bug: str) -> dict:
        return {"need": "catch", "bug": bug, "runs": ["correct", bug]}

    return [
        GradedCase("your test passes a correct longest_cached_prefix", {"need": "pass", "runs": ["correct"]},
                   weight=0.5),
        GradedCase("your test asks about a query shorter than a cached path", {"need": "shorter", "runs": ["correct"]},
                   weight=0.5),
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
    reference=_reference, drive=drive, cases=cases, compare=compare, oracle=oracle,
    forbidden=("reference_test_shorter_query",),
    # absent from the grader's executor: every implementation the student's test is run on
    strip=("radixlab.course.ex_shorter:make_implementation", "radixlab.course.ex_shorter:oracle",
           "radixlab.course.ex_shorter:_answer"))
SPECS = [SPEC]


def check_shorter_query_test(fn: Callable, record: bool = True) -> CheckResult:
    """Grade exercise 04.2: the student's test passes a correct implementation and fails wrong ones."""
    return check_exercise(SPEC, fn, record=record)
