"""Exercise 04.2 in the grader: the student's test runs in the sandbox against the spec's implementations.

Honest tests score 3, wrong tests score what their check cell says (parity), forgeries score nothing
beyond what their honest part earns. The forged tests below (reading the implementation's closure,
the callers' frames, gc, the job; remembering or counting runs in a file; forging lines on the answer
channel; using the course's own implementation) all scored 2.5 or 3 before the implementations moved
to the grader's side of the channel (``runs.py``).
"""

from __future__ import annotations

import textwrap

import pytest

from grade_helpers import grade_cells
from radixlab.course import sandbox as sb
from radixlab.course.ex_shorter import check_shorter_query_test

boxed = pytest.mark.skipif(not sb.sandboxed(), reason=f"no bubblewrap here: {sb.sandbox_works()}")

EX04_1 = textwrap.dedent("""
    def longest_cached_prefix(query_tokens, query_namespace, cached_paths, page_size):
        return 0
""")

HONEST = {
    "one exact assert": "def test_shorter_query(longest_cached_prefix):\n"
                        "    cache = [([1, 2, 3, 4, 5, 9], 'base')]\n"
                        "    assert longest_cached_prefix([1, 2, 3], 'base', cache, 2) == 2\n",
    "its own brute force on random queries": textwrap.dedent("""
        import random

        def expected(query, paths, page):
            best = 0
            for tokens, ns in paths:
                if ns != "base":
                    continue
                n = 0
                while n < min(len(query), len(tokens)) and query[n] == tokens[n]:
                    n += 1
                best = max(best, n - n % page)
            return best

        def test_shorter_query(longest_cached_prefix):
            rng = random.Random(4)
            paths = [([1, 2, 3, 4, 5, 9], "base"), ([1, 2, 7], "other")]
            for _ in range(30):
                query = [1, 2, 3, 4, 5, 9][:rng.randint(1, 5)]
                page = rng.randint(1, 4)
                assert longest_cached_prefix(query, "base", paths, page) == expected(query, paths, page)
    """),
    "tuples, a range, a None namespace, a ValueError expected": textwrap.dedent("""
        def test_shorter_query(f):
            cache = (tuple(range(10, 16)), None), ((10, 11), ("tenant", 1))
            assert f(range(10, 13), None, cache, 2) == 2
            assert f((10, 11, 12), ("tenant", 1), cache, 2) == 2
            try:
                f([10], None, cache, 0)
            except ValueError:
                pass
            else:
                raise AssertionError("page_size 0 must raise")
    """),
    "a dataclass of cases and a message on each assert": textwrap.dedent("""
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class Case:
            query: list
            page: int
            want: int

        CASES = [Case([5, 6, 7], 2, 2), Case([5, 6, 7], 4, 0), Case([5, 6, 7, 8, 9], 2, 4), Case([5], 1, 1)]

        def test_shorter_query(f):
            for case in CASES:
                got = f(case.query, "ns", [([5, 6, 7, 8, 9, 10], "ns")], case.page)
                assert got == case.want, f"{case}: got {got}"
    """),
    "a loop over page sizes, a helper, keywords": textwrap.dedent("""
        EXPECTED = {1: 3, 2: 2, 3: 3, 4: 0}

        def make_cache():
            return [([7, 8, 9, 10, 11, 12, 13], "tenant-x"), ([7, 8], "tenant-y")]

        def test_shorter_query(f):
            for page, want in EXPECTED.items():
                got = f(query_tokens=[7, 8, 9], query_namespace="tenant-x", cached_paths=make_cache(), page_size=page)
                assert got == want, (page, got, want)
    """),
}

WRONG = {  # name: (source, score, what the message says)
    "passes everything": ("def test_shorter_query(f):\n    f([1, 2, 3], 'base', [([1, 2, 3, 4, 5, 9], 'base')], 2)\n",
                          1, "reads past the end of the query"),
    "never calls": ("def test_shorter_query(f):\n    assert True\n", 0, "never calls"),
    "calls the global function": (EX04_1 + "\ndef test_shorter_query(f):\n"
                                  "    assert longest_cached_prefix([1, 2, 3], 'base', [], 2) == 0\n", 0, "never calls"),
    "wrong expected value": ("def test_shorter_query(f):\n"
                             "    assert f([1, 2, 3], 'base', [([1, 2, 3, 4, 5, 9], 'base')], 2) == 3\n",
                             0, "fails a correct implementation"),
    "not a shorter query": ("def test_shorter_query(f):\n"
                            "    assert f([1, 2, 3, 4, 5, 8], 'base', [([1, 2, 3, 4, 5, 9], 'base')], 4) == 4\n",
                            1, "none of your test's calls asks about a query shorter"),
    "shorter but diverging": ("def test_shorter_query(f):\n"  # shorter, yet not a prefix of the path
                              "    assert f([1, 2, 7], 'base', [([1, 2, 3, 4, 5, 9], 'base')], 2) == 2\n",
                              0.5, "none of your test's calls asks about a query shorter"),
}

CALL = 'f([1, 2, 3], "base", [([1, 2, 3, 4, 5, 9], "base")], 2)'

FORGERIES = {  # each makes one honest call (a correct implementation passes it, a shorter query): 1 point at most
    "reads the closure's `bug` cell": textwrap.dedent(f"""
        def test_shorter_query(f):
            {CALL}
            seen, todo = set(), [f]
            while todo:
                g = todo.pop()
                if id(g) in seen or not hasattr(g, "__code__"):
                    continue
                seen.add(id(g))
                for name, cell in zip(g.__code__.co_freevars, g.__closure__ or ()):
                    if name == "bug":
                        assert cell.cell_contents is None, "a wrong one"
                    elif callable(cell.cell_contents):
                        todo.append(cell.cell_contents)
    """),
    "reads the callers' frames": textwrap.dedent(f"""
        import sys

        def test_shorter_query(f):
            {CALL}
            frame = sys._getframe(1)
            while frame is not None:
                assert frame.f_locals.get("bug") is None, "a wrong one"
                assert frame.f_locals.get("which") != "wrong", "a wrong one"
                frame = frame.f_back
    """),
    "reads the stack with inspect": textwrap.dedent(f"""
        import inspect

        def test_shorter_query(f):
            {CALL}
            for info in inspect.stack():
                local = info.frame.f_locals
                assert local.get("bug") is None and local.get("which") != "wrong", "a wrong one"
    """),
    "scans gc for the implementation": textwrap.dedent(f"""
        import gc

        def test_shorter_query(f):
            {CALL}
            for g in gc.get_objects() + gc.get_referrers(f):
                code = getattr(g, "__code__", None)
                if code is not None and "bug" in code.co_freevars and g.__closure__:
                    cells = dict(zip(code.co_freevars, g.__closure__))
                    try:
                        bug = cells["bug"].cell_contents
                    except ValueError:
                        continue
                    if g is not f and any(getattr(c.cell_contents, "__code__", None) is code
                                          for c in (f.__closure__ or ()) if callable(c.cell_contents)):
                        assert bug is None, "a wrong one"
    """),
    "remembers the first answer in a file (snapshot)": textwrap.dedent(f"""
        import os

        def test_shorter_query(f):
            got = {CALL}
            path = "/tmp/radixlab-forged-snapshot"
            if not os.path.exists(path):
                with open(path, "w") as out:
                    out.write(str(got))
            with open(path) as seen:
                assert seen.read() == str(got), "not the first answer"
    """),
    "counts its runs in a file": textwrap.dedent(f"""
        import os

        def test_shorter_query(f):
            {CALL}
            path = "/tmp/radixlab-forged-count"
            n = int(open(path).read()) if os.path.exists(path) else 0
            with open(path, "w") as out:
                out.write(str(n + 1))
            assert n < 2, "the check cell's order: the first two runs are correct ones"
    """),
    "reads the job's cases": textwrap.dedent(f"""
        import sys

        def test_shorter_query(f):
            {CALL}
            frame = sys._getframe(1)
            while frame is not None and "job" not in frame.f_locals:
                frame = frame.f_back
            job, here = frame.f_locals["job"], frame.f_locals.get("k", 0)
            case = job["cases"][here] if frame is not None else None
            me = sys._getframe(1)
            while me is not None and "which" not in me.f_locals:
                me = me.f_back
            assert not (isinstance(case, dict) and case.get("bug") and me is not None
                        and me.f_locals["which"] == "wrong"), "a wrong one"
    """),
    "forges result lines on the answer channel": textwrap.dedent(f"""
        import os, sys

        def test_shorter_query(f):
            {CALL}
            frame = sys._getframe(1)
            while frame is not None and "emit" not in frame.f_locals:
                frame = frame.f_back
            emit, k = frame.f_locals["emit"], frame.f_locals.get("k", 0)
            shorter = [[1, 2, 3], "base", [[[1, 2, 3, 4, 5, 9], "base"]], 2, 2]
            calls = [shorter, {{"text": "x", "shorter": True, "differs": True}}]
            emit({{"case": k, "answer": {{"correct": {{"verdict": "passed", "calls": calls}},
                                        "wrong": {{"verdict": "failed", "error": "x", "calls": calls}},
                                        "verdict": "failed", "calls": calls}}, "seconds": 0.0}})
            os._exit(0)
    """),
    "uses the course's own correct implementation": textwrap.dedent("""
        from radixlab.course import ex_shorter

        def test_shorter_query(f):
            for q in ([1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 4, 5, 9, 9]):
                for p in (1, 2, 3, 4):
                    cache = [([1, 2, 3, 4, 5, 9], "base")]
                    assert f(q, "base", cache, p) == ex_shorter.make_implementation(None)(q, "base", cache, p)
    """),
}

FORGERIES_WITHOUT_CALLS = {
    "reads the closure and never calls": textwrap.dedent("""
        def test_shorter_query(f):
            bugs = [c.cell_contents for c in (f.__closure__ or ()) if callable(c.cell_contents)]
            inner = [c.cell_contents for b in bugs for c in (b.__closure__ or ())]
            assert not any(isinstance(x, str) for x in inner)
    """),
    "imports the instructor's test": "from radixlab.course.answers_prefix import reference_test_shorter_query\n"
                                     "def test_shorter_query(f):\n    reference_test_shorter_query(f)\n",
    "the instructor's test handed in": "from radixlab.course.answers_prefix import "
                                       "reference_test_shorter_query as test_shorter_query\n",
}


def _in_kernel(cells: list[str]):
    ns: dict = {"__name__": "__main__"}
    for source in cells:
        exec(compile(source, "<cell>", "exec"), ns)
    return check_shorter_query_test(ns["test_shorter_query"], record=False)


@boxed
@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_tests_score_full_marks_and_the_check_cell_agrees(name):
    result, run = grade_cells("04.2", [HONEST[name]])
    assert run.sandbox == "bubblewrap"
    assert result is not None and result.passed and result.score == 3, repr(result)
    assert [o.passed for o in _in_kernel([HONEST[name]]).outcomes] == [o.passed for o in result.outcomes]


@boxed
@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_tests_score_what_the_check_cell_says(name):
    source, score, message = WRONG[name]
    result, _ = grade_cells("04.2", [source])
    assert result is not None and result.score == score and message in repr(result), repr(result)
    kernel = _in_kernel([source])
    assert [o.message for o in kernel.outcomes] == [o.message for o in result.outcomes]


@boxed
def test_the_blank_is_not_done():
    blank = "def test_shorter_query(longest_cached_prefix):\n    raise NotImplementedError()\n"
    result, _ = grade_cells("04.2", [blank])
    assert result.not_done and result.score == 0


@boxed
@pytest.mark.parametrize("name", sorted(FORGERIES_WITHOUT_CALLS))
def test_forgeries_score_nothing(name):
    result, _ = grade_cells("04.2", [FORGERIES_WITHOUT_CALLS[name]])
    assert result is None or result.score == 0, repr(result)


@boxed
@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_forged_tests_catch_no_wrong_implementation(name):
    """No implementation is in the executor, each run is a fresh process: nothing tells a run which one it tests."""
    result, _ = grade_cells("04.2", [FORGERIES[name]])
    assert result is None or result.score <= 1, repr(result)
    assert result is None or not any(o.passed for o in result.outcomes if "fails" in o.name), repr(result)


def test_the_implementations_are_absent_from_the_executors_copy(tmp_path):
    from radixlab.course.exercises import all_specs

    spec = all_specs()["04.2"]
    sb.build_copy(spec.copy_roots(), spec.all_stripped(), tmp_path)
    try:
        text = "\n".join(p.read_text() for p in tmp_path.rglob("*.py"))
        assert "def drive(" in text and "answers_prefix" not in text
        assert "def make_implementation" not in text and "def oracle" not in text and "bug ==" not in text
    finally:
        sb.remove_copy(tmp_path)


FLOOD = textwrap.dedent("""
    import sys

    def test_shorter_query(f):
        frame = sys._getframe(1)
        while "emit" not in frame.f_locals:
            frame = frame.f_back
        for _ in range(100_000):  # questions, and never a reply read
            frame.f_locals["emit"]({"ask": [[1, 2, 3], "base", [[[1, 2, 3, 4, 5, 9], "base"]], 2]})
""")


@boxed
def test_a_run_that_asks_without_reading_the_answers_ends_alone():
    result, run = grade_cells("04.2", [FLOOD])
    assert result.score == 0 and run.seconds < 60, repr(result)


def test_every_run_of_an_implementation_must_agree():
    """Each implementation is run ``REPEAT`` times: a verdict drawn at random must be right every time."""
    from radixlab.course.ex_shorter import compare

    call = {"text": "longest_cached_prefix(...) → 6", "shorter": True, "differs": True}
    run = lambda verdict: {"verdict": verdict, "error": "", "returned": None, "calls": [call]}  # noqa: E731
    args = {"need": "catch", "bug": "whole_path", "runs": ["correct", "whole_path"]}
    passing = [run("passed")] * 3
    assert compare({"correct": passing, "whole_path": [run("failed")] * 3}, None, args) is None
    assert "passes an implementation" in compare({"correct": passing, "whole_path": [run("failed"), run("passed"),
                                                                                   run("failed")]}, None, args)
    assert "fails a correct" in compare({"correct": [run("passed"), run("failed"), run("passed")],
                                         "whole_path": [run("failed")] * 3}, None, args)


@boxed
def test_the_instructor_notebook_scores_full_marks_on_both_exercises():
    from radixlab.course import grade
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "notebooks" / "04_pages_and_namespaces.ipynb"
    report = grade.grade_submission(path, grade.load_lesson(path), seed=11)
    scores = {r["exercise"]: r["points"] for r in report["exercises"]}
    assert scores == {"04.1": 3, "04.2": 3}, report


COUNTER = textwrap.dedent("""
    RUNS = []

    def test_shorter_query(f):
        RUNS.append(1)
        f([1, 2, 3], "base", [([1, 2, 3, 4, 5, 9], "base")], 2)
        assert len(RUNS) <= 3  # the check cell's order: the correct implementation's runs first
""")


def test_a_test_that_counts_its_runs_fools_the_check_cell_only():
    """The check cell runs the test in place, one run after the other (a guide, not the grade)."""
    assert _in_kernel([COUNTER]).passed


def test_failing_without_a_wrong_answer_catches_nothing_even_in_the_check_cell():
    """A wrong implementation is caught only by a failure after a call whose answer a correct one would not give."""
    blind = COUNTER.replace("[1, 2, 3], ", "[1, 2, 3, 4], ").replace(", 2)", ", 4)")  # every one answers 4
    result = _in_kernel([blind])
    assert result.score == 1 and "failed for another reason" in repr(result), repr(result)


@boxed
def test_counting_runs_does_not_pay_in_the_grader():
    for seed in (0, 1, 2):
        result = grade_cells("04.2", [COUNTER], seed=seed)[0]
        assert result.score == 1, repr(result)  # a fresh process per run: it passes everything


def test_identity_tests_fail_in_the_check_cell_as_in_the_grader():
    """The grader's executor gets each case through JSON (fresh objects): a namespace compared with
    `is` matches nothing there. The check cell passed it the case's own objects, so it gave 3/3 to an
    answer the grader scored 0 (found by an attack review); now both get JSON-built cases."""
    from grade_helpers import in_kernel

    cells = [textwrap.dedent("""
        def longest_cached_prefix(query_tokens, query_namespace, cached_paths, page_size):
            if page_size <= 0:
                raise ValueError("page_size must be positive")
            best = 0
            for tokens, ns in cached_paths:
                if ns is not query_namespace:
                    continue
                n = 0
                while n < min(len(tokens), len(query_tokens)) and tokens[n] == query_tokens[n]:
                    n += 1
                best = max(best, n // page_size * page_size)
            return best
        """)]
    kernel = in_kernel("04.1", cells)
    result, _ = grade_cells("04.1", cells)
    assert not kernel.passed, repr(kernel)
    assert [o.passed for o in kernel.outcomes] == [o.passed for o in result.outcomes]
