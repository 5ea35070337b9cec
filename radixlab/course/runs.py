"""An exercise whose answer is a test (04.2): its cases are judged from *runs* of the student's test.

A run drives the student's test once on an implementation it may only call: the drive hands it a
function whose every call is a question (``ask``) answered by the spec's ``oracle``, in the grader's
process (in the check cell, the kernel's). The implementation never exists where the student's code
runs, and the grader runs each run in a fresh process, in an order nobody sees, so nothing but the
answers to its own calls tells a run which implementation it is testing. What the oracle records
about each call (plain data: the call's text, what it asks about, whether its answer is a wrong one)
stays where it was made; a run sends back only its test's verdict.
"""

from __future__ import annotations

import json
import random
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .spec import ExerciseSpec, GradedCase

MAX_ASKS = 10_000  # questions one run may ask
REPEAT = 3  # every run happens this often: a verdict drawn at random agrees with a test's by luck only


def run_keys(cases: list[GradedCase]) -> list[str]:
    """The runs ``cases`` need (each implementation ``args["runs"]`` names, ``REPEAT`` times: "name#i")."""
    return [f"{r}#{i}" for r in dict.fromkeys(r for c in cases for r in c.args["runs"]) for i in range(REPEAT)]


def implementation(key: str) -> str:
    """The implementation a run key names (``"correct#2"`` → ``"correct"``)."""
    return key.rpartition("#")[0] or key


def ask_oracle(oracle: Callable[[Any], tuple[Any, Any]], records: list, question: Any) -> Any:
    """Answer one question of a run (untrusted data); the oracle's record is kept in ``records``."""
    if len(records) >= MAX_ASKS:
        return {"raised": "RuntimeError", "message": f"more than {MAX_ASKS} calls in one run"}
    try:
        reply, record = oracle(question)
    except Exception as exc:  # noqa: BLE001  a question of an odd shape
        return {"raised": "TypeError", "message": f"not a call the grader answers ({type(exc).__name__})"}
    records.append(record)
    return reply


def plain_json(x: Any) -> Any:
    """``x`` as the executor channel carries it (NaN and Infinity arrive as text)."""
    return json.loads(json.dumps(x, default=repr), parse_constant=lambda c: f"<{c}>")


def case_outcomes(cases: list[GradedCase], runs: dict[str, dict]) -> list[dict]:
    """Each case's outcome from its runs' outcomes: the first run that gave no answer, else
    ``{"answer": {implementation: [each run's answer, with "calls": the oracle's records]}}`` (the
    records are the grader's own)."""
    out = []
    for case in cases:
        got: dict[str, list] = {}
        seconds, failed = 0.0, None
        for key in sorted(k for k in runs if implementation(k) in case.args["runs"]):
            o = runs.get(key) or {"error": "the run did not happen"}
            seconds += o.get("seconds", 0.0) if isinstance(o.get("seconds"), float) else 0.0
            if "answer" not in o:
                failed = failed or dict(o)
                continue
            a = o["answer"] if isinstance(o["answer"], dict) else {}
            verdict = a.get("verdict") if a.get("verdict") in ("passed", "failed", "raised") else "raised"
            returned = None if a.get("returned") is None else str(a["returned"])[:100]
            got.setdefault(implementation(key), []).append(
                {"verdict": verdict, "error": str(a.get("error", ""))[:300], "returned": returned,
                 "calls": list(o.get("asks") or [])})
        outcome = {k: v for k, v in (failed or {"answer": got}).items() if k != "asks"}
        outcome["seconds"] = seconds
        out.append(outcome)
    return out


def plan(spec: ExerciseSpec, cases: list[GradedCase]) -> tuple[list, list | None, Callable[[list], list]]:
    """What the grader's executor runs for ``cases``: (each job's args, each job's oracle or None, a
    function from the jobs' outcomes to the cases' outcomes). An oracle spec's jobs are its runs, in
    an order drawn afresh (not from the seed: nobody, not even who knows the seed, can tell them apart)."""
    if spec.oracle is None:
        return [c.args for c in cases], None, lambda outcomes: outcomes
    keys = run_keys(cases)
    random.SystemRandom().shuffle(keys)
    oracles = [lambda q, key=key: spec.oracle(implementation(key), q) for key in keys]
    return [None] * len(keys), oracles, lambda outcomes: case_outcomes(cases, dict(zip(keys, outcomes)))
