"""The course rubric, stated once: check cells, the grader and notebook 04's rubric table all read it.

Lesson 4 of the seeds: code 4 points per exercise = main path 2 (the exercise's visible asserts, scored
automatically) + boundary cases 1 (hidden edge cases, scored automatically) + mapping to the source
objects 1 (marked by hand, from the written follow-up that goes with the exercise); each written
question 2 points (by hand); a lesson passes at 80 % of its points. A notebook may override numbers
in its metadata ``{"radixlab": {"rubric": {...}}}``; the grader reports the rubric it used.
"""

from __future__ import annotations

RUBRIC = {"main": 2.0, "boundary": 1.0, "mapping": 1.0, "question": 2.0, "pass_fraction": 0.8}


def auto_points(rubric: dict | None = None) -> float:
    """Automatic points per exercise (main + boundary): the scale of every check cell's score."""
    r = rubric or RUBRIC
    return r["main"] + r["boundary"]


def rubric_table(exercises: int = 1, questions: int = 0, rubric: dict | None = None) -> str:
    """The rubric as text, with the pass line for a lesson of ``exercises`` and ``questions``."""
    r = rubric or RUBRIC
    total = exercises * (auto_points(r) + r["mapping"]) + questions * r["question"]
    lines = [
        f"code, per exercise       {auto_points(r) + r['mapping']:g} points",
        f"  main path              {r['main']:g}  automatic: the exercise's visible asserts",
        f"  boundary cases         {r['boundary']:g}  automatic: hidden edge cases (the grader draws fresh ones)",
        f"  maps to source objects {r['mapping']:g}  by hand: the written follow-up of the exercise",
        f"written question         {r['question']:g} points each, by hand: objects, state change, cost or correctness chain",
        f"pass                     {r['pass_fraction']:.0%} of the points"
        + (f": {r['pass_fraction'] * total:g}/{total:g} here" if total else ""),
    ]
    return "\n".join(lines)
