"""Predict, then run: compare a student's guess with what the notebook measured (never graded).

A notebook asks a question, the student writes ``my_guess = ...`` in a small cell, and the next cell
calls ``check_prediction(my_guess, measured)``; the result's text is a friendly verdict. A blank
guess (``None``, ``...`` or ``""``) says "write your guess first". Notebook 00 is the first user.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import Sequence

BLANK = (None, Ellipsis, "")


@dataclass(frozen=True)
class Prediction:
    """A verdict: ``status`` is blank, invalid, close, near, far (numbers) or right, wrong (choices)."""

    status: str
    text: str

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


def _number(x: object) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool) and math.isfinite(float(x))


def check_prediction(guess: object, actual: object, *, choices: Sequence[str] | None = None,
                     tolerance: float = 0.25, unit: str = "") -> Prediction:
    """Compare ``guess`` with ``actual``: a number (within ``tolerance``, relative) or one of ``choices``.

    A number within ``tolerance`` of ``actual`` is "close", within a factor of 2 "near", else "far".
    With ``choices``, ``actual`` must be one of them and the guess is matched case-insensitively.
    """
    if not (isinstance(tolerance, Real) and 0 <= tolerance < 1):
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    if choices is not None:
        names = [str(c) for c in choices]
        if not names or actual not in names:
            raise ValueError(f"actual must be one of choices {names}, got {actual!r}")
    elif not _number(actual) or float(actual) <= 0:
        raise ValueError(f"actual must be a positive finite number, got {actual!r}")
    if any(guess is b or (isinstance(guess, str) and guess.strip() == "") for b in BLANK):
        return Prediction("blank", "✍️ Write your guess first: set `my_guess` in the cell above, run it, "
                                   "then run this cell again.")
    if choices is not None:
        return _judge_choice(guess, str(actual), names)
    if not _number(guess):
        return Prediction("invalid", f"⚠️ Your guess should be a number (like 4 or 2.5), got {guess!r}.")
    g, a = float(guess), float(actual)
    said = f"you guessed {g:g}{unit}, measured {a:.3g}{unit}"
    if abs(g - a) <= tolerance * a:
        return Prediction("close", f"🎯 Close: {said}.")
    side = "more" if a > g else "less"
    if g > 0 and max(g / a, a / g) <= 2:
        return Prediction("near", f"👍 Not far: {said}; it is {side} than you thought.")
    factor = max(g / a, a / g) if g > 0 else math.inf
    how = f"about {factor:.1f}×" if math.isfinite(factor) else "far"
    return Prediction("far", f"😮 Surprise: {said}, {how} {side} than you thought. "
                             "The next cell says why.")


def _judge_choice(guess: object, actual: str, names: list[str]) -> Prediction:
    folded = {n.casefold().strip(): n for n in names}
    key = str(guess).casefold().strip()
    if key not in folded:
        options = ", ".join(repr(n) for n in names)
        return Prediction("invalid", f"⚠️ Pick one of {options}; got {guess!r}.")
    if folded[key] == actual:
        return Prediction("right", f"🎯 Right: {actual}.")
    return Prediction("wrong", f"✗ Not quite: you picked {folded[key]!r}, the answer is {actual!r}. "
                               "The next cell says why.")
