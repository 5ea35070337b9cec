"""Exercise 09.1 (notebook 09_scheduling_and_serving): the LPM order, in-batch check included.

The student writes ``lpm_order(waiting, tree) -> (order, deprioritized)``: ``waiting`` is a list of
``(rid, token_ids)`` in arrival order, ``tree`` the cache (a ``RadixCache``). The answer is what
SGLang's ``_compute_prefix_matches`` and ``_sort_by_longest_prefix`` do: match every request against
the tree; a request with at most 32 cached tokens is also matched against a scratch tree of the
waiting queue, and is deprioritized if an earlier waiting request shares at least 32 tokens with it
(otherwise its tokens go into the scratch tree); then longest cached prefix first, ties in arrival
order, the deprioritized last in arrival order. The cache's tree is only matched, never changed.

Cases: the notebook's queue and a tie (main), then the one-request-at-a-time simulator
(``radixlab.sim.schedule_sim``) driven by the student's order on a shared-system-prompt queue with a
tiny cache, whose served order and hit rate must equal LPM's (main); hidden: the thresholds at exactly
32 (cached, shared) and 31, an empty queue, the caller's list and the cache's tree left alone, and
agreement with ``radixlab.engine.schedule_policy`` on random queues.
"""

from __future__ import annotations

import random
from typing import Any, Callable

from ..tree import common_prefix_len
from .spec import CheckResult, ExerciseSpec, GradedCase, check_exercise

EXERCISE = "09.1"
TITLE = "the LPM order"
THRESHOLD = 32  # both of SGLang's in-batch thresholds

_P = list(range(100, 196))  # the notebook's cached 96-token prompt
_S = list(range(200, 240))  # a 40-token prefix nobody has cached yet
SEED_TREE = [_P]
"""What the cache holds in the notebook's example (token lists inserted into a fresh tree)."""
SEED_QUEUE = [("q1", _S + [1]), ("q2", _P + [2]), ("q3", _S + [3]), ("q4", _P[:40] + [4, 5]), ("q5", [7, 8, 9]),
              ("q6", _P + [6])]
SEED_ORDER = ["q2", "q6", "q4", "q1", "q5", "q3"]
SEED_DEPRIORITIZED = {"q3"}


def _tree(prompts: list) -> Any:
    from ..mem_cache import RadixCache, RadixKey

    tree = RadixCache()
    for p in prompts:
        tree.insert(RadixKey(list(p)))
    return tree


def _size(tree: Any) -> int:
    return tree.evictable_size() + tree.protected_size()


def _call(fn: Callable, prompts: list, waiting: list) -> Any:
    """One call on a fresh tree and a fresh copy of the queue; what came back, as plain data."""
    tree = _tree(prompts)
    before = _size(tree)
    w = [[rid, list(ids)] for rid, ids in waiting]
    got = fn(w, tree)
    if w != [[rid, list(ids)] for rid, ids in waiting]:
        return {"mutated": True}
    if _size(tree) != before:
        return {"tree_changed": True}
    if not (isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[0], (list, tuple))
            and isinstance(got[1], (set, frozenset, list, tuple))):
        return {"type": type(got).__name__}
    return {"order": [str(r) for r in got[0]], "deprioritized": sorted(str(r) for r in got[1])}


def _simulate(fn: Callable, seed: int) -> dict:
    """Serve a shuffled shared-system-prompt queue one request at a time, ``fn`` choosing the next."""
    from ..sim.schedule_sim import serve_dynamic
    from ..sim.workloads import generated_shared_prefix

    trace = generated_shared_prefix(num_groups=4, prompts_per_group=4, system_prompt_len=64, question_len=16,
                                    output_len=8, seed=seed)

    def pick(waiting: list, cache: Any) -> Any:
        got = fn([[f"r{r.rid}", list(r.origin_input_ids)] for r in waiting], cache)
        first = str(list(got[0])[0])
        return next(r for r in waiting if f"r{r.rid}" == first)

    res = serve_dynamic(trace, max(len(r) for r in trace), pick)
    return {"order": list(res.order), "hit_rate": round(res.hit_rate, 6)}


def drive(fn: Callable, args: dict) -> Any:
    if "sim" in args:
        return _simulate(fn, args["sim"])
    return [_call(fn, prompts, waiting) for prompts, waiting in args["calls"]]


def _facts(prompts: list, waiting: list) -> dict:
    """rid -> (cached tokens, tokens shared with an earlier waiting request), for the messages."""
    from ..mem_cache import RadixKey

    tree, out = _tree(prompts), {}
    for i, (rid, ids) in enumerate(waiting):
        shared = max((common_prefix_len(ids, e) for _, e in waiting[:i]), default=0)
        out[rid] = (len(tree.match_prefix(RadixKey(list(ids)))), shared)
    return out




def _explain(prompts: list, waiting: list, got: set, want: set) -> str:
    facts = _facts(prompts, waiting)
    for rid in [r for r, _ in waiting if r in got ^ want]:
        cached, shared = facts[rid]
        if rid in got and cached > THRESHOLD:
            return (f"{rid} was deprioritized, but {cached} of its tokens are cached: only a request with at most "
                    f"{THRESHOLD} cached tokens goes through the in-batch check")
        if rid in got and shared < THRESHOLD:
            return (f"{rid} was deprioritized, but no earlier waiting request shares {THRESHOLD} tokens with it "
                    f"(at most {shared}): match the scratch tree first, then insert the request if it stays")
        if rid in got:
            return (f"{rid} was deprioritized, but the earlier requests it shares a prefix with were deprioritized "
                    "themselves: only a request that stays goes into the scratch tree")
        if rid in want and cached == THRESHOLD:
            return (f"{rid} has exactly {THRESHOLD} tokens cached, and 'at most {THRESHOLD}' includes {THRESHOLD}: "
                    "it goes through the in-batch check and should be deprioritized")
        if rid in want and shared == THRESHOLD:
            return (f"{rid} shares exactly {THRESHOLD} tokens with an earlier waiting request, and 'at least "
                    f"{THRESHOLD}' includes {THRESHOLD}: it should be deprioritized")
        return (f"{rid} has {cached} cached tokens and shares {shared} with an earlier waiting request: it should "
                "be deprioritized (is every request with a short cached prefix matched against a scratch tree of "
                "the waiting queue, and every one that stays inserted there?)")
    return "the deprioritized set differs"


def _explain_order(got: list, want: list, held: set) -> str:
    head = f"the order should be {want}; it was {got}"
    if sorted(got) != sorted(want):
        return f"{head}: return every waiting rid once"
    tail = [r for r in want if r in held]
    if got[len(got) - len(tail):] != tail:
        return f"{head}: the deprioritized requests go last, in arrival order, whatever their cached prefix"
    return f"{head}: longest cached prefix first, equal prefixes in arrival order (a stable sort)"


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
    for (prompts, waiting), g, x in zip(args["calls"], got, want):
        if g.get("mutated"):
            return "lpm_order changed the caller's queue: return new lists, change nothing you were given"
        if g.get("tree_changed"):
            return ("lpm_order changed the cache's tree (it inserted into `tree`): the in-batch check needs a "
                    "scratch tree of its own; the cache is only matched")
        if "type" in g:
            return f"lpm_order must return (order, deprioritized), got a {g['type']}"
        if g["deprioritized"] != x["deprioritized"]:
            return _explain(prompts, waiting, set(g["deprioritized"]), set(x["deprioritized"]))
        if g["order"] != x["order"]:
            return _explain_order(g["order"], x["order"], set(x["deprioritized"]))
    return None if got == want else "a different number of answers came back"


def _tokens(rng: random.Random, n: int) -> list:
    return [rng.randrange(1000, 30000) for _ in range(n)]


def visible_queues(seed: int) -> tuple[list, list, list, list]:
    """The check cell's two visible calls as (tree prompts, queue) twice; a grader seed renames the rids and
    redraws the tokens and lengths (same shape as the notebook's example; then a tie behind a longer one)."""
    tie_tree = [list(range(1, 41))]
    ties = [("b", list(range(1, 11)) + [90]), ("a", list(range(1, 11)) + [91]), ("c", list(range(1, 21)) + [92])]
    if not seed:
        return SEED_TREE, [(r, list(t)) for r, t in SEED_QUEUE], tie_tree, ties
    rng = random.Random(seed)
    r = [f"{rng.choice('abcdpqxyz')}{n}" for n in rng.sample(range(10, 99), 9)]
    p, s = _tokens(rng, rng.randrange(64, 160)), _tokens(rng, rng.randrange(33, 60))
    mid = rng.randrange(THRESHOLD + 1, len(p) - 8)
    queue = [(r[0], s + _tokens(rng, 3)), (r[1], p + _tokens(rng, 2)), (r[2], s + _tokens(rng, 2)),
             (r[3], p[:mid] + _tokens(rng, 4)), (r[4], _tokens(rng, 5)), (r[5], p + _tokens(rng, 3))]
    base = _tokens(rng, 40)
    n = rng.randrange(2, 20)
    first, second = sorted(r[6:8], reverse=True)  # arrival order against name order
    ties = [(first, base[:n] + _tokens(rng, 2)), (second, base[:n] + _tokens(rng, 2)),
            (r[8], base[:n + rng.randrange(1, 15)] + _tokens(rng, 2))]
    return [p], queue, [base], ties


def random_queues(n: int, seed: int = 0) -> list[list]:
    """``n`` random (tree prompts, queue) with shared prefixes of every length around the thresholds."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        stems = [_tokens(rng, rng.randrange(20, 80)) for _ in range(3)]
        tree = [s[:rng.randrange(0, len(s))] for s in stems if rng.random() < 0.6]
        rids = rng.sample([f"r{i}" for i in range(20)], rng.randint(0, 8))
        queue = [[rid, rng.choice(stems)[:rng.choice([0, 20, 31, 32, 33, 40, 80])] + _tokens(rng, rng.randint(1, 3))]
                 for rid in rids]
        out.append([tree, queue])
    return out


def cases(seed: int = 0) -> list[GradedCase]:
    call = lambda *calls: {"calls": [[[list(p) for p in t], [[r, list(i)] for r, i in w]] for t, w in calls]}  # noqa: E731
    tree, queue, tie_tree, ties = visible_queues(seed)
    rng = random.Random(100 + seed)
    u, v, t32 = _tokens(rng, 40), _tokens(rng, 40), _tokens(rng, 32)
    return [
        GradedCase("the notebook's queue", call((tree, queue))),
        GradedCase("equal cached prefixes keep arrival order", call((tie_tree, ties))),
        GradedCase("served one at a time, your order reaches LPM's hit rate", {"sim": 5 + seed}, weight=2),
        GradedCase("exactly 32 cached tokens still goes through the in-batch check",
                   call(([t32], [("a", t32 + u + [1]), ("b", t32 + u + [2])])), "boundary"),
        GradedCase("sharing exactly 32 tokens deprioritizes; 31 does not",
                   call(([], [("c", v[:32] + [1]), ("d", v[:32] + [2]), ("e", u[:31] + [3]), ("f", u[:31] + [4])])),
                   "boundary"),
        GradedCase("the deprioritized go last in arrival order, whatever their cached prefix; a group of three; "
                   "an empty queue",
                   call(([u[:10]], [("m", u + [1]), ("n", v + [1]), ("o", v + [2]), ("p", u + [2])]),
                        ([], [("g", u + [5]), ("h", u + [6]), ("i", u + [7])]), ([], [])), "boundary"),
        GradedCase("leaves the caller's queue and the cache's tree alone",
                   call(([u], [("j", u + [1]), ("k", v + [2]), ("l", v + [3])])), "boundary"),
        GradedCase("agrees with SGLang's in-batch check and sort (radixlab's) on random queues",
                   {"calls": random_queues(60, seed=11 + seed)}, "boundary", weight=2),
    ]


def _reference(*args: Any) -> Any:
    from .answers_sched import reference_lpm_order
    return reference_lpm_order(*args)


SPEC = ExerciseSpec(
    id=EXERCISE, title=TITLE, function="lpm_order", check="check_lpm_order",
    reference=_reference, drive=drive, cases=cases, compare=compare, time_limit=30.0,
    forbidden=("reference_lpm_order", "answers_sched", "sort_by_longest_prefix", "order_queue",
               "compute_prefix_matches", "POLICIES", "OrderingPolicy", "LpmPolicy", "calc_priority",
               "radixlab.engine.policies.*", "radixlab.engine.schedule_policy.*"),
    strip=("radixlab.engine.schedule_policy:sort_by_longest_prefix", "radixlab.engine.schedule_policy:order_queue",
           "radixlab.engine.schedule_policy:compute_prefix_matches",
           "radixlab.sim.schedule_sim:serve_with_policy", "radixlab.sim.schedule_sim:compare_orders",
           "radixlab.sim.schedule_sim:service_frames"),  # absent in the executor
    answer_imports=("radixlab.mem_cache",))
SPECS = [SPEC]


def check_lpm_order(lpm_order: Callable, record: bool = True) -> CheckResult:
    """Check a student's ``lpm_order(waiting, tree)`` (exercise 09.1)."""
    return check_exercise(SPEC, lpm_order, record=record)
