"""``TreeNode``: one node of the radix cache (SGLang keeps it in ``mem_cache/radix_cache.py``).

``key`` is a ``RadixKey`` (the edge's tokens), ``value`` the int64 KV slots of those tokens, one per
unit; ``lock_ref`` counts the live requests whose match ends at or below it. Differences from
SGLang: ``last_access_time`` and ``creation_time`` are ticks of the cache's logical clock, ids
count from 1 per cache, and ``owner`` names the tree the node belongs to, so a node of another cache
is refused in O(1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .radix_key import RadixKey


class TreeNode:
    """A radix-tree node: ``key`` (RadixKey) → ``value`` (int64 slot indices, one per unit)."""

    __slots__ = ("id", "key", "value", "children", "parent", "lock_ref", "last_access_time",
                 "creation_time", "hit_count", "priority", "owner")

    def __init__(self, node_id: int, key: RadixKey, value: torch.Tensor | None,
                 parent: TreeNode | None, now: int, priority: int = 0) -> None:
        self.id = node_id
        self.key = key
        self.value = value
        self.children: dict[tuple, TreeNode] = {}
        self.parent = parent
        self.lock_ref = 0
        self.last_access_time = now
        self.creation_time = now
        self.hit_count = 0
        self.priority = priority
        self.owner: object = None  # the tree it belongs to (RadixCache._owner), for an O(1) "foreign node" check

    @property
    def evicted(self) -> bool:
        return self.value is None

    def __lt__(self, other: TreeNode) -> bool:  # heap tie-break: older node first
        return self.id < other.id

    def __repr__(self) -> str:
        return (f"TreeNode(id={self.id}, key={self.key!r}, lock_ref={self.lock_ref}, "
                f"last_access_time={self.last_access_time})")
