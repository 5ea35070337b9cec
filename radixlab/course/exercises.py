"""Every graded exercise of the course: the ``SPECS`` list of each ``radixlab/course/ex_*.py`` module.

Adding an exercise needs no edit here: write ``ex_<topic>.py`` with ``SPECS = [ExerciseSpec(...)]``
(see CONTRIBUTING.md, "Exercises"). The grader imports this registry once, before it runs any
student code.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from .spec import ExerciseSpec


@lru_cache(maxsize=1)
def all_specs() -> dict[str, ExerciseSpec]:
    """``{exercise id: spec}`` over every ``ex_*`` module; duplicate ids or check names are an error."""
    from . import __path__ as here

    specs: dict[str, ExerciseSpec] = {}
    checks: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(here), key=lambda m: m.name):
        if not info.name.startswith("ex_"):
            continue
        module = importlib.import_module(f"{__package__}.{info.name}")
        for spec in getattr(module, "SPECS", []):
            if spec.id in specs:
                raise ValueError(f"exercise id {spec.id} defined twice ({info.name})")
            if spec.check in checks:
                raise ValueError(f"check {spec.check} used by {checks[spec.check]} and {spec.id}")
            specs[spec.id], checks[spec.check] = spec, spec.id
    return specs


def by_check(name: str) -> ExerciseSpec | None:
    return next((s for s in all_specs().values() if s.check == name), None)


def for_lesson(number: str) -> list[ExerciseSpec]:
    """The exercises of notebook ``NN`` (by their id), in id order."""
    return sorted((s for s in all_specs().values() if s.lesson == number), key=lambda s: s.id)


