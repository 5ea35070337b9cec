"""Exercise 10.1 (notebook 10_timing_side_channel): the salt a trusted layer sets.

The student writes ``tenant_extra_key(tenant, client_salt) -> str``: ``tenant`` is the authenticated
identity (the gateway knows it; the client cannot choose it), ``client_salt`` what the request carried
(``None`` if nothing). The key is what the engine's ``extra_key`` gets. It must be a string (SGLang's
``extra_key`` is one), the same for the same pair on every call (else one tenant never shares), equal
for no salt and an empty salt, different for two tenants whatever salts they send (no forging:
concatenation is not enough, names may contain any separator), and different for two salts of one
tenant (a salt narrows sharing, never widens it).

Cases: the notebook's two tenants and B's forgeries of A's key (main), then: salts narrow, no salt vs
empty, two calls agree, separators inside names, and random pairs (hidden).
"""

from __future__ import annotations

import builtins
import random
from typing import Any, Callable

from .spec import CheckResult, ExerciseSpec, GradedCase, check_exercise

EXERCISE = "10.1"
TITLE = "the salt a trusted layer sets"


def _norm(pair: list) -> tuple:
    return (pair[0], pair[1] or "")


def _as_in_another_process(fn: Callable, pairs: list) -> list:
    """The keys as a second gateway process would compute them, as far as ``hash()`` goes: Python salts the
    hash of every str per process (PYTHONHASHSEED), so ``hash()`` is stable within a process and differs
    between two. Stand-in: ``hash()`` with another salt while ``fn`` runs."""
    real = builtins.hash
    builtins.hash = lambda obj: real((obj, "another process"))
    try:
        return [fn(t, s) for t, s in pairs]
    finally:
        builtins.hash = real


def drive(fn: Callable, args: dict) -> Any:
    """Every pair's key, twice (two calls, in two orders), and once more as another process would compute
    it: plain data for ``compare``."""
    pairs = [tuple(p) for p in args["pairs"]]
    first = [fn(t, s) for t, s in pairs]
    again = [fn(t, s) for t, s in reversed(pairs)][::-1]
    other = _as_in_another_process(fn, pairs)
    def plain(k: Any) -> Any:
        return k if isinstance(k, str) else {"type": type(k).__name__, "repr": repr(k)[:80]}
    return {"keys": [plain(k) for k in first], "again": [plain(k) for k in again],
            "other_process": [plain(k) for k in other]}


def _show(pair: tuple) -> str:
    return f"(tenant {pair[0]!r}, salt {pair[1]!r})"


def compare(got: Any, want: Any, args: dict) -> str | None:
    pairs = [tuple(p) for p in args["pairs"]]
    keys, again = got["keys"], got["again"]
    for p, k in zip(pairs, keys):
        if not isinstance(k, str):
            return (f"tenant_extra_key{p} returned a {k['type']} ({k['repr']}): return a string, as SGLang's "
                    "extra_key is one")
    for p, k, k2 in zip(pairs, keys, again):
        if k != k2:
            return (f"two calls for {_show(p)} gave different keys ({k!r}, {k2!r}): the key must be the same every "
                    "time, or a tenant's requests never share their own prefixes (no randomness, no hash() that "
                    "changes between processes)")
    for p, k, k2 in zip(pairs, keys, got.get("other_process", keys)):
        if k != k2:
            return (f"{_show(p)} gets another key in another Python process ({k!r}, then {k2!r}): hash() of a "
                    "str is salted per process (PYTHONHASHSEED), so after a restart, or on a second gateway worker, "
                    "tenant A lands in a new namespace and stops sharing its own prefixes. Encode the pair itself "
                    "(or use hashlib), not hash()")
    seen: dict = {}
    for p, k in zip(pairs, keys):
        q = seen.setdefault(k, p)
        if _norm(q) == _norm(p):
            continue
        if q[0] != p[0]:
            if all(keys[i] == keys[j] for i, a in enumerate(pairs) for j, b in enumerate(pairs)
                   if (a[1] or "") == (b[1] or "")):
                return (f"{_show(q)} and {_show(p)} get the same key {k!r}: the key ignores the tenant, so B sends "
                        "A's salt (or none) and shares A's cache again. Derive it from the authenticated tenant")
            return (f"{_show(q)} and {_show(p)} get the same key {k!r}: two tenants share a namespace. Joining "
                    "strings, even with a separator, can be forged when a name may contain it; make the join "
                    "unambiguous (say, the length of each part in front of it)")
        return (f"{_show(q)} and {_show(p)} get the same key {k!r}: within a tenant the client's salt must narrow "
                "sharing (two salts, two namespaces), not be dropped")
    for p, k in zip(pairs, keys):
        for q, k2 in zip(pairs, keys):
            if _norm(p) == _norm(q) and k != k2:
                return (f"{_show(p)} and {_show(q)} get different keys: no salt and an empty salt both mean the "
                        "tenant's own namespace")
    return None


def _name(rng: random.Random) -> str:
    return "".join(rng.choice("ab|:/,-_ 0") for _ in range(rng.randrange(0, 5)))


def cases(seed: int = 0) -> list[GradedCase]:
    rng = random.Random(seed)
    a, b = ("tenant-A", "tenant-B") if not seed else (f"org{rng.randrange(100)}", f"team{rng.randrange(100)}")
    forgeries = [None, "", a, b, f"{a}{a}", f"|{a}", f"{a}|", "x", f"{len(a)}:{a}", f"{b}|{a}"]
    pairs = ([[a, None], [b, None], [a, None], [b, "x"]]
             + [[b, s] for s in forgeries] + [[a, "x"], [a, "ab"]])
    sep = [["ab", "c"], ["a", "bc"], ["a|b", "c"], ["a", "b|c"], ["a:b", "c"], ["a", "b:c"], ["a/b", "c"], ["a", "b/c"],
           ["a,b", "c"], ["a", "b,c"], ["a b", "c"], ["a", "b c"], ["a-b", "c"], ["a", "b-c"], ["a_b", "c"],
           ["a", "b_c"], ["1:a", "1:b"], ["1", "a|1:b"], ["a", "|"], ["a|", ""], ["a", None], ["", "a"], ["a", ""],
           ["a\x00b", "c"], ["a", "b\x00c"], ["a\x1fb", "c"], ["a", "b\x1fc"], ["a\nb", "c"], ["a", "b\nc"],
           ["a\\", "|b"], ["a|\\", "b"], ["A", "c"], ["a", "c"]]
    rand = [[_name(rng), rng.choice([None, "", _name(rng)])] for _ in range(120)]
    return [
        GradedCase("two tenants, no salt: two namespaces; one tenant twice: one", {"pairs": [[a, None], [b, None],
                                                                                            [a, None]]}),
        GradedCase("B cannot reach A's namespace with any salt it sends", {"pairs": pairs}, weight=2),
        GradedCase("a client's salt narrows sharing inside its tenant",
                   {"pairs": [[a, None], [a, "alice"], [a, "bob"], [a, "alice"]]}, "boundary"),
        GradedCase("no salt and an empty salt are the same namespace; two calls agree",
                   {"pairs": [[a, None], [a, ""], [b, ""], [b, None]]}, "boundary"),
        GradedCase("names that contain separators cannot forge a join", {"pairs": sep}, "boundary", weight=2),
        GradedCase("random tenants and salts: one key per (tenant, salt)", {"pairs": rand}, "boundary"),
    ]


def _reference(*args: Any) -> Any:
    from .answers_salt import reference_tenant_extra_key
    return reference_tenant_extra_key(*args)


SPEC = ExerciseSpec(
    id=EXERCISE, title=TITLE, function="tenant_extra_key", check="check_tenant_extra_key",
    reference=_reference, drive=drive, cases=cases, compare=compare, time_limit=10.0,
    forbidden=("reference_tenant_extra_key", "answers_salt"))
SPECS = [SPEC]


def check_tenant_extra_key(tenant_extra_key: Callable, record: bool = True) -> CheckResult:
    """Check a student's ``tenant_extra_key(tenant, client_salt)`` (exercise 10.1)."""
    return check_exercise(SPEC, tenant_extra_key, record=record)
