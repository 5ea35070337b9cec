"""The "Predict, then run" comparison: blank, close, near, far, choices, and bad arguments."""

from __future__ import annotations

import math

import pytest

from radixlab.course.predict import check_prediction


@pytest.mark.parametrize("blank", [None, ..., "", "   "])
def test_blank_guess_asks_for_a_guess(blank):
    p = check_prediction(blank, 4.0)
    assert p.status == "blank" and "Write your guess first" in repr(p)


def test_number_close_near_far():
    assert check_prediction(4.2, 4.0).status == "close"
    near = check_prediction(3, 5.0)
    assert near.status == "near" and "more than you thought" in near.text
    far = check_prediction(16, 4.0)
    assert far.status == "far" and "4.0×" in far.text and "less than you thought" in far.text
    assert check_prediction(0, 4.0).status == "far"
    assert check_prediction(-2, 4.0).status == "far"


def test_tolerance_is_relative():
    assert check_prediction(110, 100, tolerance=0.1).status == "close"
    assert check_prediction(111, 100, tolerance=0.1).status == "near"


@pytest.mark.parametrize("bad", ["four", [4], True, math.nan, math.inf])
def test_non_number_guess_is_a_friendly_message(bad):
    p = check_prediction(bad, 4.0)
    assert p.status == "invalid" and "should be a number" in p.text


def test_choices():
    choices = ["4x", "a bit more than 4x", "16x"]
    assert check_prediction(" A bit more than 4X ", "a bit more than 4x", choices=choices).status == "right"
    wrong = check_prediction("16x", "a bit more than 4x", choices=choices)
    assert wrong.status == "wrong" and "'a bit more than 4x'" in wrong.text
    assert check_prediction("8x", "16x", choices=choices).status == "invalid"
    assert check_prediction(None, "16x", choices=choices).status == "blank"


@pytest.mark.parametrize("kwargs, match", [
    ({"actual": 0}, "actual must be a positive"),
    ({"actual": "4"}, "actual must be a positive"),
    ({"actual": 4.0, "tolerance": 1.5}, "tolerance must be"),
    ({"actual": "8x", "choices": ["4x", "16x"]}, "actual must be one of choices"),
    ({"actual": "4x", "choices": []}, "actual must be one of choices"),
])
def test_bad_arguments_raise_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        check_prediction(3, **kwargs)
