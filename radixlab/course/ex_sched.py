"""Exercise 09.1 (notebook 09_scheduling_and_serving): the longest-prefix-match order.

The student writes ``lpm_order(waiting, deprioritized) -> rids`` over plain data: ``waiting`` is a
list of ``(rid, cached_prefix_len)`` pairs in arrival order (the scheduler matched each request
against the tree already), ``deprioritized`` the set of rids the in-batch prefix check held back.
The answer is the order SGLang's ``_sort_by_longest_prefix`` gives: longest cached prefix first,
ties in arrival order, deprioritized requests last (in arrival order: SGLang gives them all the
same key, ``inf``).

Cases: the notebook's queue and ties (main), then the one-request-at-a-time simulator
(``radixlab.sim.schedule_sim``) driven by the student's order on a shared-system-prompt queue with a
tiny cache, whose served order and hit rate must equal LPM's (main); hidden: the deprioritized tail,
an empty queue, everything held back, the caller's list left alone, and agreement with
``radixlab.engine.schedule_policy.sort_by_longest_prefix`` on random queues.
"""

from __future__ import annotations

import random
from typing import Any, Callable

from .spec import CheckResult, ExerciseSpec, GradedCase, check_exercise

EXERCISE = "09.1"
TITLE = "the LPM order"

SEED_QUEUE = [("q1", 0), ("q2", 96), ("q3", 40), ("q4", 96), ("q5", 0)]
"""The notebook's queue: (rid, cached prefix length), in arrival order."""
SEED_DEPRIORITIZED = {"q5"}
SEED_ORDER = ["q2", "q4", "q3", "q1", "q5"]


def _order(fn: Callable, waiting: list, deprioritized: list) -> Any:
    """One call on fresh copies; the rids as plain strings, or a note that the inputs were changed."""
    w, d = [list(x) for x in waiting], set(deprioritized)
    got = fn(w, d)
    if w != [list(x) for x in waiting] or d != set(deprioritized):
        return {"mutated": True}
    if not isinstance(got, (list, tuple)):
        return {"type": type(got).__name__}
    return [str(r) for r in got]


def _simulate(fn: Callable, seed: int) -> dict:
    """Serve a shuffled shared-system-prompt queue one request at a time, ``fn`` choosing the next."""
    from ..engine.schedule_policy import compute_prefix_matches
    from ..sim.schedule_sim import serve_dynamic
    from ..sim.workloads import generated_shared_prefix

    trace = generated_shared_prefix(num_groups=4, prompts_per_group=4, system_prompt_len=64, question_len=16,
                                    output_len=8, seed=seed)

    def pick(waiting: list, cache: Any) -> Any:
        prefix_len, _, dep = compute_prefix_matches(waiting, cache)
        order = fn([[f"r{r.rid}", prefix_len[r.rid]] for r in waiting], {f"r{rid}" for rid in dep})
        first = str(list(order)[0])
        return next(r for r in waiting if f"r{r.rid}" == first)

    res = serve_dynamic(trace, max(len(r) for r in trace), pick)
    return {"order": list(res.order), "hit_rate": round(res.hit_rate, 6)}


def drive(fn: Callable, args: dict) -> Any:
    if "sim" in args:
        return _simulate(fn, args["sim"])
    return [_order(fn, w, d) for w, d in args["calls"]]


def compare(got: Any, want: Any, args: dict) -> str | None:
    if "sim" in args:
        if got == want:
            return None
        mine = got.get("hit_rate") if isinstance(got, dict) else None
        if mine is not None and abs(mine - want["hit_rate"]) < 1e-9:
            return (f"served one at a time with your order, the hit rate is LPM's ({mine:.1%}), but the requests are "
                    "served in another order: among equal cached prefixes, keep arrival order (a stable sort)")
        return (f"served one at a time with your order, the hit rate is "
                f"{'?' if mine is None else format(mine, '.1%')}; LPM reaches {want['hit_rate']:.1%}. "
                "Longest cached prefix first?")
    for (w, d), g, x in zip(args["calls"], got, want):
        if isinstance(g, dict) and g.get("mutated"):
            return "lpm_order changed the caller's queue or set: return a new list, change neither"
        if isinstance(g, dict):
            return f"lpm_order must return a list of rids, got a {g['type']}"
        if g != x:
            queue = [tuple(p) for p in w]
            return f"lpm_order({queue}, {set(d) or '{}'}) should return {x}; it returned {g}"
    return None if got == want else "a different number of answers came back"


def random_queues(n: int, seed: int = 0) -> list[list]:
    """``n`` random (waiting, deprioritized) with many ties; arrival order differs from name order."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        rids = rng.sample([f"r{i}" for i in range(20)], rng.randint(0, 8))
        waiting = [[rid, rng.choice([0, 0, 16, 32, 40, 96])] for rid in rids]
        out.append([waiting, sorted(rid for rid, _ in waiting if rng.random() < 0.25)])
    return out


def visible_queues(seed: int) -> tuple[list, set, list]:
    """The check cell's two visible queues; a grader seed renames the rids and redraws the lengths (same
    shape: two equal longest, one in between, two zeros, the last held back; then a tie behind a longer one)."""
    if not seed:
        return SEED_QUEUE, SEED_DEPRIORITIZED, [("b", 5), ("a", 5), ("c", 9)]
    rng = random.Random(seed)
    r = [f"{rng.choice('abcdpqxyz')}{n}" for n in rng.sample(range(10, 99), 8)]
    hi, mid, tie = rng.randrange(50, 200), rng.randrange(1, 49), rng.randrange(1, 30)
    queue = [(r[0], 0), (r[1], hi), (r[2], mid), (r[3], hi), (r[4], 0)]
    first, second = sorted(r[5:7], reverse=True)  # arrival order against name order
    return queue, {r[4]}, [(first, tie), (second, tie), (r[7], tie + rng.randrange(1, 20))]


def cases(seed: int = 0) -> list[GradedCase]:
    call = lambda *calls: {"calls": [[[list(p) for p in w], sorted(d)] for w, d in calls]}  # noqa: E731
    queue, held, ties = visible_queues(seed)
    return [
        GradedCase("the notebook's queue", call((queue, held))),
        GradedCase("equal prefixes keep arrival order", call((ties, set()))),
        GradedCase("served one at a time, your order reaches LPM's hit rate", {"sim": 5 + seed}, weight=2),
        GradedCase("deprioritized requests go last, in arrival order (whatever their prefix)",
                   call(([("y", 0), ("x", 3), ("z", 30)], {"y", "z"})), "boundary"),  # neither arrival nor plain LPM order
        GradedCase("an empty queue; everything deprioritized",
                   call(([], set()), ([("k", 1), ("m", 9)], {"m", "k"})), "boundary"),
        GradedCase("leaves the caller's queue alone", call(([("a", 1), ("b", 7), ("c", 3)], {"a"})), "boundary"),
        GradedCase("agrees with SGLang's sort (radixlab's sort_by_longest_prefix) on random queues",
                   {"calls": random_queues(150, seed=11 + seed)}, "boundary", weight=2),
    ]


def _reference(*args: Any) -> list:
    from .answers_sched import reference_lpm_order
    return reference_lpm_order(*args)


SPEC = ExerciseSpec(
    id=EXERCISE, title=TITLE, function="lpm_order", check="check_lpm_order",
    reference=_reference, drive=drive, cases=cases, compare=compare, time_limit=30.0,
    forbidden=("reference_lpm_order", "answers_sched", "sort_by_longest_prefix", "order_queue",
               "compute_prefix_matches", "POLICIES", "OrderingPolicy", "LpmPolicy", "calc_priority",
               "radixlab.engine.policies.*", "radixlab.engine.schedule_policy.*"),
    strip=("radixlab.engine.schedule_policy:sort_by_longest_prefix", "radixlab.engine.schedule_policy:order_queue",
           "radixlab.sim.schedule_sim:serve_with_policy", "radixlab.sim.schedule_sim:compare_orders",
           "radixlab.sim.schedule_sim:service_frames"))  # absent in the executor
SPECS = [SPEC]


def check_lpm_order(lpm_order: Callable, record: bool = True) -> CheckResult:
    """Check a student's ``lpm_order(waiting, deprioritized)`` (exercise 09.1)."""
    return check_exercise(SPEC, lpm_order, record=record)
