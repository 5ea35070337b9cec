"""Eviction policies: which unlocked leaf ``RadixCache.evict`` frees first (notebook 06_eviction).

A policy is any callable from a ``TreeNode`` to a sort key; the smallest key is evicted first.
Mirrors SGLang's ``mem_cache/evict_policy.py`` (LRU, LFU, FIFO, MRU, FILO, priority).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .radix_cache import TreeNode


EVICTION_POLICIES: dict[str, Callable[["TreeNode"], Any]] = {
    "lru": lambda n: n.last_access_time,
    "lfu": lambda n: (n.hit_count, n.last_access_time),
    "fifo": lambda n: n.creation_time,
    "mru": lambda n: -n.last_access_time,
    "filo": lambda n: -n.creation_time,
    "priority": lambda n: (n.priority, n.last_access_time),
}


def _resolve_policy(policy: str | Callable[["TreeNode"], Any]) -> Callable[["TreeNode"], Any]:
    if callable(policy):
        return policy
    if not isinstance(policy, str) or policy.lower() not in EVICTION_POLICIES:
        raise ValueError(f"eviction_policy must be one of {sorted(EVICTION_POLICIES)} or a callable, got {policy!r}")
    return EVICTION_POLICIES[policy.lower()]
