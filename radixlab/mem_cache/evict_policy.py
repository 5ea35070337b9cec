"""Eviction policies: which unlocked leaf ``RadixCache.evict`` frees first (notebook 06_eviction).

A policy is any callable from a ``TreeNode`` to a sort key; the smallest key is evicted first.
Mirrors SGLang's ``mem_cache/evict_policy.py`` (LRU, LFU, FIFO, MRU, FILO, priority, SLRU); the
differential test (tests/test_sglang_differential.py) checks each against SGLang's own classes.
Differences from SGLang: a policy is a key function, not an ``EvictionStrategy`` class; times are
ticks of the cache's logical clock, and ties go to the smaller node id (see below).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .tree_node import TreeNode


# Ties: our clock ticks once per match/insert, SGLang's ``time.monotonic()`` once per stamp. Within
# one tick SGLang stamps the nodes a walk passes first and the nodes it creates after, in creation
# order; node ids follow that order. So a tie on the key goes to the smaller id (``TreeNode.__lt__``,
# the heap's fallback), and the two policies that take the *newest* first negate the id as well.
# (tests/test_sglang_differential.py found the MRU case: two leaves stamped in one tick.)
SLRU_PROTECTED_THRESHOLD = 2  # SGLang's SLRUStrategy default: hit twice -> protected segment

EVICTION_POLICIES: dict[str, Callable[["TreeNode"], Any]] = {
    "lru": lambda n: n.last_access_time,
    "lfu": lambda n: (n.hit_count, n.last_access_time),
    "fifo": lambda n: n.creation_time,
    "mru": lambda n: (-n.last_access_time, -n.id),
    "filo": lambda n: (-n.creation_time, -n.id),
    "priority": lambda n: (n.priority, n.last_access_time),
    # segmented LRU: nodes hit fewer than the threshold (probationary) go before protected ones
    "slru": lambda n: (int(n.hit_count >= SLRU_PROTECTED_THRESHOLD), n.last_access_time),
}


def _resolve_policy(policy: str | Callable[["TreeNode"], Any]) -> Callable[["TreeNode"], Any]:
    if callable(policy):
        return policy
    if not isinstance(policy, str) or policy.lower() not in EVICTION_POLICIES:
        raise ValueError(f"eviction_policy must be one of {sorted(EVICTION_POLICIES)} or a callable, got {policy!r}")
    return EVICTION_POLICIES[policy.lower()]
