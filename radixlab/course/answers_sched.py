"""Instructor answer of exercise 09.1 (never imported by a notebook: the student edition cannot see it).

The grader computes 09.1's expected values from it, in its own process.
"""

from __future__ import annotations

from typing import Sequence


def reference_lpm_order(waiting: Sequence[Sequence], deprioritized: set) -> list:
    """SGLang's ``_sort_by_longest_prefix`` on plain data: one stable sort, deprioritized keyed ``inf``."""
    ranked = sorted(waiting, key=lambda w: float("inf") if w[0] in deprioritized else -w[1])
    return [w[0] for w in ranked]
