"""Exercise 09.1 (notebook 09_scheduling_and_serving): the longest-prefix-match order.

The student writes ``lpm_order(waiting, deprioritized) -> rids`` over plain data: ``waiting`` is a
list of ``(rid, cached_prefix_len)`` in arrival order (the scheduler matched each request against
the tree already), ``deprioritized`` the set of rids the in-batch prefix check held back. The
answer is the order SGLang's ``_sort_by_longest_prefix`` gives: longest cached prefix first, ties
in arrival order, deprioritized requests last (in arrival order: SGLang gives them all the same
key, ``inf``).

The check runs the seed-style queue, hidden edge cases (ties, the deprioritized tail, an empty
queue, the caller's list untouched), then drives the one-request-at-a-time simulator
(``radixlab.schedule_sim``) with the student's order on a shared-system-prompt queue and a small
cache, and compares the hit rate with radixlab's LPM; the mapping case compares with
``radixlab.engine.policies.sort_by_longest_prefix`` (the source object it maps to).
"""

from __future__ import annotations

import random
from typing import Callable, Sequence

from ..engine.policies import SimRequest, compute_prefix_matches, sort_by_longest_prefix
from ..radix_cache import RadixCache
from ..schedule_sim import serve_dynamic, serve_with_policy
from ..workloads import generated_shared_prefix
from .check import Case, CheckResult, expect_equal, own_code, run_check

EXERCISE = "09.1"
TITLE = "the LPM order"

LpmOrder = Callable[[list, set], list]

SEED_QUEUE = [("q1", 0), ("q2", 96), ("q3", 40), ("q4", 96), ("q5", 0)]
"""The notebook's queue: (rid, cached prefix length), in arrival order."""
SEED_DEPRIORITIZED = {"q5"}
SEED_ORDER = ["q2", "q4", "q3", "q1", "q5"]


def reference_lpm_order(waiting: Sequence[tuple], deprioritized: set) -> list:
    """The instructor's answer: one stable sort with SGLang's key."""
    ranked = sorted(waiting, key=lambda w: float("inf") if w[0] in deprioritized else -w[1])
    return [rid for rid, _ in ranked]


def _call(fn: LpmOrder, waiting: list, deprioritized: set, what: str) -> list:
    got = fn([tuple(w) for w in waiting], set(deprioritized))
    if not isinstance(got, (list, tuple)):
        raise AssertionError(f"{what}: lpm_order must return a list of rids, got {type(got).__name__}")
    got = list(got)
    rids = [rid for rid, _ in waiting]
    if sorted(map(str, got)) != sorted(map(str, rids)):
        raise AssertionError(f"{what}: return every waiting rid exactly once; got {got!r} for queue {rids!r}")
    return got


def _expect_order(fn: LpmOrder, waiting: list, deprioritized: set, what: str) -> None:
    expect_equal(_call(fn, waiting, deprioritized, what), reference_lpm_order(waiting, deprioritized), what)


def _leaves_input_alone(fn: LpmOrder) -> None:
    waiting, dep = [("a", 1), ("b", 7), ("c", 3)], {"a"}
    fn(waiting, dep)
    expect_equal((waiting, dep), ([("a", 1), ("b", 7), ("c", 3)], {"a"}),
                 "the caller's queue and set after lpm_order (return a new list, change neither)")


def _pick_with(fn: LpmOrder) -> Callable[[list, RadixCache], SimRequest]:
    def pick(waiting: list, cache: RadixCache) -> SimRequest:
        prefix_len, _, dep = compute_prefix_matches(waiting, cache)
        order = _call(fn, [(f"r{r.rid}", prefix_len[r.rid]) for r in waiting], {f"r{rid}" for rid in dep},
                      "inside the scheduler")
        return next(r for r in waiting if f"r{r.rid}" == str(order[0]))
    return pick


def _hit_rate_matches_lpm(fn: LpmOrder) -> None:
    trace = generated_shared_prefix(num_groups=4, prompts_per_group=4, system_prompt_len=64, question_len=16,
                                    output_len=8, seed=5)
    capacity = max(len(r) for r in trace)  # one request's worth: a wrong order thrashes the cache
    mine = serve_dynamic(trace, capacity, _pick_with(fn)).hit_rate
    want = serve_with_policy(trace, "lpm", capacity).hit_rate
    fcfs = serve_with_policy(trace, "fcfs", capacity).hit_rate
    if abs(mine - want) > 1e-9:
        raise AssertionError(f"served one at a time with your order, the hit rate is {mine:.1%}; LPM reaches "
                             f"{want:.1%} (FCFS {fcfs:.1%}). Longest cached prefix first?")


def random_queues(n: int, seed: int = 0) -> list[tuple[list, set]]:
    """``n`` random queues with many ties and some deprioritized requests (the mapping case's inputs)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(0, 8)
        rids = rng.sample([f"r{i}" for i in range(20)], k)  # arrival order differs from name order
        waiting = [(rid, rng.choice([0, 0, 16, 32, 40, 96])) for rid in rids]
        out.append((waiting, {rid for rid, _ in waiting if rng.random() < 0.25}))
    return out


def _agrees_with_schedule_policy(fn: LpmOrder) -> None:
    for waiting, dep in random_queues(150):
        queue = [SimRequest(rid, ()) for rid, _ in waiting]
        want = [r.rid for r in sort_by_longest_prefix(queue, dict(waiting), dep)]
        expect_equal(_call(fn, waiting, dep, f"queue {waiting}, deprioritized {sorted(dep)}"), want,
                     "agreement with radixlab.engine.policies.sort_by_longest_prefix")


def check_lpm_order(lpm_order: LpmOrder) -> CheckResult:
    """Check a student's ``lpm_order(waiting, deprioritized)`` (exercise 09.1)."""
    if not callable(lpm_order):
        raise TypeError(f"lpm_order must be a function lpm_order(waiting, deprioritized), got {type(lpm_order).__name__}")
    fn = own_code(lpm_order, "lpm_order", reference_lpm_order, sort_by_longest_prefix)
    cases = [
        Case("the notebook's queue", lambda: _expect_order(fn, SEED_QUEUE, SEED_DEPRIORITIZED, "the notebook's queue")),
        Case("equal prefixes keep arrival order",
             lambda: _expect_order(fn, [("b", 5), ("a", 5), ("c", 9)], set(), "ties")),
        Case("served one at a time, your order reaches LPM's hit rate", lambda: _hit_rate_matches_lpm(fn), points=2),
        Case("deprioritized requests go last, in arrival order (whatever their prefix)",
             lambda: _expect_order(fn, [("x", 3), ("y", 0), ("z", 30)], {"y", "z"}, "deprioritized tail"), hidden=True),
        Case("an empty queue", lambda: _expect_order(fn, [], set(), "empty queue"), hidden=True),
        Case("everything deprioritized", lambda: _expect_order(fn, [("m", 9), ("k", 1)], {"m", "k"}, "all held back"),
             hidden=True),
        Case("leaves the caller's queue alone", lambda: _leaves_input_alone(fn), hidden=True),
        Case("agrees with radixlab's sort_by_longest_prefix on random queues",
             lambda: _agrees_with_schedule_policy(fn), part="mapping"),
    ]
    return run_check(EXERCISE, TITLE, cases)
