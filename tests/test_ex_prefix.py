"""Exercise 04.1: the check passes the solution, says "not done yet" to the blank, fails wrong answers."""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlab.course import spec as check
from radixlab.course.answers_prefix import reference_longest_cached_prefix
from radixlab.course.edition import blank_solutions, strip_markers
from radixlab.course.ex_prefix import check_longest_cached_prefix, radix_longest_cached_prefix

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "04_pages_and_namespaces.ipynb"


def _with_aligned(rule):
    """The lesson's function with ``aligned = rule(common, page_size)`` in the blank."""
    def fn(query_tokens, query_namespace, cached_paths, page_size, *, _ns=True):
        if page_size <= 0:
            raise ValueError("page_size must be positive")
        best = 0
        for cached_tokens, cached_namespace in cached_paths:
            if _ns and cached_namespace != query_namespace:
                continue
            common = 0
            for left, right in zip(query_tokens, cached_tokens):
                if left != right:
                    break
                common += 1
            best = max(best, rule(common, page_size))
        return best
    return fn


def blank(query_tokens, query_namespace, cached_paths, page_size):
    raise NotImplementedError()


def ignore_namespace(q, ns, paths, p):
    return _with_aligned(lambda c, p: c // p * p)(q, ns, paths, p, _ns=False)


def no_validation(q, ns, paths, p):
    if p <= 0:
        return 0
    return reference_longest_cached_prefix(q, ns, paths, p)


def test_reference_passes_with_full_score():
    result = check_longest_cached_prefix(lambda *args: reference_longest_cached_prefix(*args), record=False)
    assert result.passed, repr(result)
    assert (result.score, result.max_score) == (3, 3)
    assert repr(result).startswith("✅ Exercise 04.1 (longest_cached_prefix): passed.")
    assert "All 10 checks passed (6 of them hidden" in repr(result)


def test_radix_answer_also_passes():
    assert check_longest_cached_prefix(lambda *args: radix_longest_cached_prefix(*args), record=False).passed


def test_handing_in_radixlab_own_answer_fails():
    for own in (reference_longest_cached_prefix, radix_longest_cached_prefix):
        result = check_longest_cached_prefix(own, record=False)
        assert result.score == 0 and "write your own" in repr(result)


def test_hidden_edge_cases_need_the_blank_line():
    result = check_longest_cached_prefix(lambda q, ns, paths, p: 0 if p > 0 else 1 // 0, record=False)
    assert not any(o.passed for o in result.outcomes if o.hidden)


def test_blank_is_not_done_yet_and_recorded():
    n = len(check.RESULTS)
    result = check_longest_cached_prefix(blank)
    assert result.not_done and not result.passed
    assert repr(result).startswith("⏳ Exercise 04.1 (longest_cached_prefix): not done yet")
    assert check.RESULTS[n:] == [result] and result.score == 0


@pytest.mark.parametrize("name, fn", [
    ("aligned = common", _with_aligned(lambda c, p: c)),
    ("ceil instead of floor", _with_aligned(lambda c, p: math.ceil(c / p) * p)),
    ("round to nearest page", _with_aligned(lambda c, p: round(c / p) * p)),
    ("one page short", _with_aligned(lambda c, p: max(c // p * p - p, 0))),
    ("ignores the namespace", ignore_namespace),
    ("no page_size check", no_validation),
])
def test_plausible_wrong_answers_fail(name, fn):
    result = check_longest_cached_prefix(fn, record=False)
    assert not result.passed and not result.not_done, name
    assert repr(result).startswith("❌ Exercise 04.1"), name
    assert result.score < 3


def test_main_path_alone_scores_two():
    # Right on the lesson's cases, wrong everywhere else: main path points only.
    def only_seed_cases(q, ns, paths, p):
        table = {((1, 2, 3, 4, 5, 8), "base", 4): 4, ((1, 2, 3, 4, 6, 7), "adapter-A", 2): 6,
                 ((1, 2, 3, 4), "adapter-B", 2): 0, ((1, 2, 3, 4), "base", 2): 4, ((1, 2, 3), "base", 2): 2}
        return table.get((tuple(q), ns, p), 99)
    result = check_longest_cached_prefix(only_seed_cases, record=False)
    assert result.score == 2


def _first_match(q, ns, paths, p):
    if p <= 0:
        raise ValueError("page_size must be positive")
    for tokens, n in paths:
        if n == ns:
            return _with_aligned(lambda c, p: c // p * p)(q, ns, [(tokens, n)], p)
    return 0


def _last_match(q, ns, paths, p):
    if p <= 0:
        raise ValueError("page_size must be positive")
    best = 0
    for tokens, n in paths:
        if n == ns:
            best = _with_aligned(lambda c, p: c // p * p)(q, ns, [(tokens, n)], p)
    return best


def _count_equal(q, ns, paths, p):
    if p <= 0:
        raise ValueError("page_size must be positive")
    return max([sum(a == b for a, b in zip(q, t)) // p * p for t, n in paths if n == ns], default=0)


def _mutates(q, ns, paths, p):
    paths.sort(key=lambda tn: -len(tn[0]))  # "optimises" by sorting the caller's cache
    return reference_longest_cached_prefix(q, ns, paths, p)


@pytest.mark.parametrize("fn", [_first_match, _last_match, _count_equal], ids=lambda f: f.__name__)
def test_several_paths_per_namespace_catch_scan_mistakes(fn):
    result = check_longest_cached_prefix(fn, record=False)
    failed = [o.name for o in result.outcomes if not o.passed]
    assert "several paths per namespace: the longest shared prefix wins wherever it stands" in failed
    assert result.part_score("boundary") < 1


def test_a_lookup_table_from_the_check_messages_fails_in_the_grader():
    """The grader draws the hidden cases' tokens from its own seed: answers copied from messages miss."""
    from radixlab.course import ex_prefix
    seen = {}
    for case in ex_prefix.cases(0):
        for q, ns, paths, p in case.args["calls"]:
            seen[(tuple(q), ns, p)] = ex_prefix.drive(lambda *a: reference_longest_cached_prefix(*a),
                                                      {"calls": [[q, ns, paths, p]]})[0]

    def table(q, ns, paths, p):
        return seen.get((tuple(q), ns, p), 0)

    assert check_longest_cached_prefix(table, record=False).passed  # the check cell's own cases: fooled
    graded = ex_prefix.SPEC
    cases = graded.cases(12345)
    fails = [c.name for c in cases if ex_prefix.drive(table, c.args) != ex_prefix.drive(graded.reference, c.args)]
    assert any("several paths" in n for n in fails) and any("random caches" in n for n in fails)


def test_mutating_the_cached_paths_is_reported():
    text = repr(check_longest_cached_prefix(_mutates, record=False))
    assert "changed its arguments" in text and "must not modify the cache" in text


@settings(max_examples=300, deadline=None)
@given(paths=st.lists(st.tuples(st.lists(st.integers(1, 3), max_size=12), st.sampled_from(["base", "A", "B"])),
                      max_size=5),
       query=st.lists(st.integers(1, 3), max_size=12), ns=st.sampled_from(["base", "A", "B"]),
       page_size=st.integers(1, 8))
def test_reference_and_radix_cache_always_agree(paths, query, ns, page_size):
    assert reference_longest_cached_prefix(query, ns, paths, page_size) == \
        radix_longest_cached_prefix(query, ns, paths, page_size)


@pytest.mark.parametrize("bad", [0, -3])
def test_both_raise_on_bad_page_size(bad):
    for fn in (reference_longest_cached_prefix, radix_longest_cached_prefix):
        with pytest.raises(ValueError, match="page_size must be"):
            fn([1], "base", [([1], "base")], bad)


def _exercise_cell() -> str:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and "### BEGIN SOLUTION" in c.source
             and "def longest_cached_prefix" in c.source]
    assert len(cells) == 1
    return cells[0]


@pytest.mark.skipif(not NOTEBOOK.exists(), reason="notebook 04 not written yet")
def test_notebook_exercise_both_editions():
    src = _exercise_cell()
    region = src.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
    assert region.strip() == "aligned = common // page_size * page_size"
    assert "# TODO: only whole pages can be reused as a prefix" in src
    solved, student = {}, {}
    exec(strip_markers(src), solved)
    assert check_longest_cached_prefix(solved["longest_cached_prefix"], record=False).passed
    exec(blank_solutions(src), student)
    assert check_longest_cached_prefix(student["longest_cached_prefix"], record=False).not_done
    assert "# aligned = ______" in blank_solutions(src)  # the student edition shows the variable, as the seed does
