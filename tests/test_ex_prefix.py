"""Exercise 04.1: the check passes the solution, says "not done yet" to the blank, fails wrong answers."""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlab.course import ex_prefix
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


def ceil_and_any_namespace(q, ns, paths, p):
    return _with_aligned(lambda c, p: math.ceil(c / p) * p)(q, ns, paths, p, _ns=False)


def returns_a_float(q, ns, paths, p):
    return float(reference_longest_cached_prefix(q, ns, paths, p))


@pytest.mark.parametrize("name, fn, says", [
    ("aligned = common", _with_aligned(lambda c, p: c), "you returned the raw match, without rounding to pages"),
    ("ceil instead of floor", _with_aligned(lambda c, p: math.ceil(c / p) * p), "you rounded up to a whole page"),
    ("round to nearest page", _with_aligned(lambda c, p: round(c / p) * p), "you rounded to the nearest page"),
    ("one page short", _with_aligned(lambda c, p: max(c // p * p - p, 0)), "one page short: you dropped a page"),
    ("ignores the namespace", ignore_namespace, "you reused a path cached under another namespace"),
    ("no page_size check", no_validation, "a page_size of 0 must raise ValueError"),
    ("ceil and any namespace", ceil_and_any_namespace,
     "another namespace: only paths whose namespace equals query_namespace count (equal tokens under another "
     "extra_key are another model's KV); and you rounded up"),
    ("a float", returns_a_float, "return an int"),
])
def test_plausible_wrong_answers_fail_naming_the_mistake(name, fn, says):
    result = check_longest_cached_prefix(fn, record=False)
    assert not result.passed and not result.not_done, name
    assert repr(result).startswith("❌ Exercise 04.1"), name
    assert result.score < 3
    assert says in repr(result), repr(result)
    graded = check.check_exercise(ex_prefix.SPEC, fn, seed=12345, record=False)  # the grader's fresh tokens
    assert says in repr(graded), repr(graded)


@pytest.mark.parametrize("name, fn", [
    ("ceil", _with_aligned(lambda c, p: math.ceil(c / p) * p)),
    ("one page short", _with_aligned(lambda c, p: max(c // p * p - p, 0))),
    ("ignores the namespace", ignore_namespace),
])
def test_each_named_mistake_is_named_on_every_case_it_fails_and_no_other_is(name, fn):
    """A mistake is named only when it explains every answer of the case: never a wrong accusation."""
    result = check_longest_cached_prefix(fn, record=False)
    named = {"ceil": "rounded up", "one page short": "one page short", "ignores the namespace": "another namespace"}
    for o in result.outcomes:
        if not o.passed:
            assert named[name] in o.message, o.message
            assert all(v not in o.message for k, v in named.items() if k != name), o.message


def test_a_mistake_outside_the_list_gets_a_hint_not_a_wrong_name():
    """First match wins agrees with 'one page short' on some call; it is not blamed for it."""
    for seed in (0, 12345):
        result = check.check_exercise(ex_prefix.SPEC, _first_match, seed=seed, record=False)
        text = repr(result)
        assert "that misses reusable tokens" in text and "one page short" not in text, text


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


# -- exercise 04.2: the student's own shorter-query test ---------------------------------------------

from radixlab.course.answers_prefix import reference_test_shorter_query  # noqa: E402
from radixlab.course.ex_shorter import BUGS, check_shorter_query_test, make_implementation  # noqa: E402
from radixlab.course.ex_prefix import random_cases  # noqa: E402

SEED = [([1, 2, 3, 4, 5, 9], "base")]


def _good_test(f):
    assert f([1, 2, 3], "base", SEED, 2) == 2


def _blank_test(f):
    raise NotImplementedError()


def _passes_everything(f):
    f([1, 2, 3], "base", SEED, 2)  # calls, never asserts


def _never_calls(f):
    assert True


def _uses_the_global(f):
    assert reference_longest_cached_prefix([1, 2, 3], "base", SEED, 2) == 2  # not its argument


def _wrong_expectation(f):
    assert f([1, 2, 3], "base", SEED, 2) == 3  # forgot to round down


def _returns_instead_of_asserting(f):
    return f([1, 2, 3], "base", SEED, 2) == 2


def _not_a_shorter_query(f):
    assert f([1, 2, 3, 4, 5, 8], "base", SEED, 4) == 4  # the seed's first assert again


def _page_aligned_query(f):
    assert f([1, 2, 3, 4], "base", SEED, 2) == 4  # shorter, but ends on a page boundary


def _always_fails(f):
    f([1, 2, 3], "base", SEED, 2)
    raise AssertionError("nothing passes")


def test_make_implementation_correct_one_agrees_with_the_reference():
    for case in random_cases(300, seed=3):
        assert make_implementation(None)(*case) == reference_longest_cached_prefix(*case)
    with pytest.raises(ValueError, match="bug must be"):
        make_implementation("nope")


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_each_bug_is_wrong_somewhere(bug):
    assert any(make_implementation(bug)(*c) != reference_longest_cached_prefix(*c) for c in random_cases(300, seed=5))


@pytest.mark.parametrize("bug", ["whole_path", "round_up_partial"])
def test_short_query_bugs_are_right_on_every_other_query(bug):
    """They are wrong only when the query is a proper prefix of a cached path: the lesson's missing case."""
    for q, ns, paths, p in random_cases(500, seed=6):
        if not any(n == ns and len(q) < len(t) and list(t[:len(q)]) == list(q) for t, n in paths):
            assert make_implementation(bug)(q, ns, paths, p) == reference_longest_cached_prefix(q, ns, paths, p)


def test_reference_test_and_a_students_good_test_score_full_marks():
    result = check_shorter_query_test(_good_test, record=False)
    assert result.passed and (result.score, result.max_score) == (3, 3), repr(result)
    own = check_shorter_query_test(reference_test_shorter_query, record=False)
    assert own.score == 0 and "write your own" in repr(own)


def test_blank_test_is_not_done_yet():
    result = check_shorter_query_test(_blank_test, record=False)
    assert result.not_done and repr(result).startswith("⏳ Exercise 04.2")


@pytest.mark.parametrize("test, score, message", [
    (_passes_everything, 1, "your test passes an implementation that returns the whole cached path"),
    (_never_calls, 0, "never calls the `longest_cached_prefix` it was given"),
    (_uses_the_global, 0, "calls the notebook's own function by its global name"),
    (_wrong_expectation, 0, "your test fails a correct implementation"),
    (_returns_instead_of_asserting, 1, "*returned* False instead of failing: use `assert`"),
    (_not_a_shorter_query, 1, "none of your test's calls asks about a query shorter"),
    (_always_fails, 0, "your test fails a correct implementation (AssertionError: nothing passes)"),
    (_page_aligned_query, 2, "counts the query's half-filled last page"),
], ids=lambda x: getattr(x, "__name__", None) if callable(x) else None)
def test_wrong_tests_fail_naming_the_mistake(test, score, message):
    result = check_shorter_query_test(test, record=False)
    assert not result.passed and not result.not_done
    assert result.score == score, repr(result)
    assert message in repr(result), repr(result)


def test_a_test_that_tells_implementations_apart_by_name_cannot():
    def by_name(f):
        assert f.__name__ == "longest_cached_prefix" and f.__qualname__.startswith("run_test")
    result = check_shorter_query_test(by_name, record=False)
    assert "never calls" in repr(result) and result.score == 0


def _test_cell() -> str:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and "def test_shorter_query(" in c.source]
    assert len(cells) == 1 and "### BEGIN SOLUTION" in cells[0]
    return cells[0]


def test_notebook_04_2_both_editions():
    src = _test_cell()
    solved, student = {"longest_cached_prefix": reference_longest_cached_prefix}, \
        {"longest_cached_prefix": reference_longest_cached_prefix}
    exec(strip_markers(src), solved)
    assert check_shorter_query_test(solved["test_shorter_query"], record=False).passed
    exec(blank_solutions(src), student)
    assert check_shorter_query_test(student["test_shorter_query"], record=False).not_done


def test_the_seed_asserts_cell_keeps_its_three_asserts_and_leaves_the_short_query_to_the_student():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cell = next(c.source for c in nb.cells if c.cell_type == "code" and "cache = [" in c.source
                and "assert longest_cached_prefix" in c.source)
    asserts = [line.strip() for line in cell.splitlines() if line.strip().startswith("assert ")]
    assert asserts == ['assert longest_cached_prefix([1, 2, 3, 4, 5, 8], "base", cache, 4) == 4',
                       'assert longest_cached_prefix([1, 2, 3, 4, 6, 7], "adapter-A", 2) == 6'.replace(
                           '"adapter-A", 2', '"adapter-A", cache, 2'),
                       'assert longest_cached_prefix([1, 2, 3, 4], "adapter-B", cache, 2) == 0']


def test_an_endless_test_times_out():
    from radixlab.course import ex_shorter
    from radixlab.course.spec import check_exercise

    def endless(f):
        f([1, 2, 3], "base", SEED, 2)
        while True:
            pass

    result = check_exercise(ex_shorter.SPEC, endless, record=False, time_limit=0.3)
    assert all(o.outcome == "timeout" for o in result.outcomes), repr(result)
