"""Exercise 10.1 (the salt a trusted layer sets): the solution passes; a blank and plausible wrong
answers fail, each with a message that names its mistake."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from pathlib import Path

import pytest

from radixlab.course.answers_salt import reference_tenant_extra_key
from radixlab.course.ex_salt import SPEC, check_tenant_extra_key
from grade_helpers import notebook_solution as _notebook_solution

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "10_timing_side_channel.ipynb"


def notebook_solution():
    return _notebook_solution(NOTEBOOK, "tenant_extra_key")


def blank(tenant, client_salt):
    raise NotImplementedError()


_counter = itertools.count()


def _digest(t, s):
    """A helper that hides the hash() call one level down."""
    return hash((t, s or ""))

WRONG = {
    "trusts the client's salt": (lambda t, s: s or "", "ignores the tenant"),
    "the salt, else the tenant": (lambda t, s: s or t, "two tenants share a namespace"),
    "plain concatenation": (lambda t, s: t + (s or ""), "can be forged"),
    "a separator a name may contain": (lambda t, s: f"{t}|{s or ''}", "can be forged"),
    "ignores the salt": (lambda t, s: t, "must narrow"),
    "a random key per request": (lambda t, s: f"{t}|{s}|{next(_counter)}", "different keys"),
    "a tuple, not a string": (lambda t, s: (t, s or ""), "return a string"),
    "None printed into the key": (lambda t, s: json.dumps([t, s]), "no salt and an empty salt"),
    # found by an attack review: separators a name "never" contains, escaping one character, case folding
    "a NUL separator": (lambda t, s: t + "\x00" + (s or ""), "can be forged"),
    "a newline separator": (lambda t, s: t + "\n" + (s or ""), "can be forged"),
    "tenant names folded to lower case": (lambda t, s: f"{len(t)}:{t.lower()}|{s or ''}", "two tenants share"),
    # stable within one process, another key after a restart: the hint warns against it, the check shows it
    "str(hash(...)) of the pair": (lambda t, s: str(hash((t, s or ""))), "another Python process"),
    "hash() in a helper": (lambda t, s: f"k{_digest(t, s)}", "PYTHONHASHSEED"),
}


def test_reference_is_injective():
    rng = random.Random(0)
    pairs = {("".join(rng.choice("ab|:1") for _ in range(rng.randrange(4))),
              "".join(rng.choice("ab|:1") for _ in range(rng.randrange(4)))) for _ in range(2000)}
    assert len({reference_tenant_extra_key(t, s) for t, s in pairs}) == len(pairs)
    assert reference_tenant_extra_key("a", None) == reference_tenant_extra_key("a", "")


@pytest.mark.skipif(not NOTEBOOK.exists(), reason="notebook 10 not written yet")
def test_notebook_solution_passes_with_full_marks():
    result = check_tenant_extra_key(notebook_solution(), record=False)
    assert result.passed and result.score == result.max_score == 3, repr(result)


def test_other_honest_answers_pass():
    for honest in (lambda t, s: json.dumps([t, s or ""]), lambda t, s: repr((t, s or "")),
                   lambda t, s: f"{t.encode().hex()}.{(s or '').encode().hex()}",
                   lambda t, s: hashlib.sha256(json.dumps([t, s or ""]).encode()).hexdigest()):
        assert check_tenant_extra_key(honest, record=False).passed


def test_blank_is_not_done_yet():
    result = check_tenant_extra_key(blank, record=False)
    assert result.not_done and result.score == 0 and repr(result).startswith("⏳ Exercise 10.1")


def test_handing_in_radixlab_own_answer_fails():
    result = check_tenant_extra_key(reference_tenant_extra_key, record=False)
    assert not result.passed and result.score == 0


@pytest.mark.parametrize("name", sorted(WRONG))
def test_plausible_wrong_answers_fail_and_are_named(name):
    wrong, says = WRONG[name]
    result = check_tenant_extra_key(wrong, record=False)
    text = repr(result)
    assert not result.passed and not result.not_done and result.score < result.max_score, text
    assert text.startswith("❌ Exercise 10.1") and says in text, text


def test_grader_seeds_draw_other_cases_that_the_solution_still_passes():
    from radixlab.course.spec import check_exercise
    for seed in (1, 2):
        assert SPEC.cases(seed)[1].args != SPEC.cases(0)[1].args
        assert check_exercise(SPEC, lambda t, s: json.dumps([t, s or ""]), seed=seed, record=False).passed
