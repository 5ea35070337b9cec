"""Exercise 04.2 in the grader: the student's test runs in the sandbox against the spec's implementations.

Honest tests score 3, wrong tests score what their check cell says (parity), forgeries score nothing.
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
}

FORGERIES = {
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
@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_forgeries_score_nothing(name):
    result, _ = grade_cells("04.2", [FORGERIES[name]])
    assert result is None or result.score == 0, repr(result)


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
        assert len(RUNS) not in (4, 6, 8)  # the check cell's order: correct, correct, then correct/wrong pairs
""")


def test_a_test_that_counts_its_runs_fools_the_check_cell_in_a_kernel_only(monkeypatch):
    from radixlab.course import ex_shorter

    assert not _in_kernel([COUNTER]).passed  # outside a kernel every run is a fresh fork: nothing to count
    monkeypatch.setattr(ex_shorter, "isolate", lambda: False)  # a Jupyter kernel runs the test in place
    assert _in_kernel([COUNTER]).passed


@boxed
def test_counting_runs_does_not_pay_in_the_grader():
    for seed in (0, 1, 2):
        result = grade_cells("04.2", [COUNTER], seed=seed)[0]
        assert result.score == 1, repr(result)  # a fresh fork per run: it passes everything
