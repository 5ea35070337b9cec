"""The written interface every prefix cache implements, and what ``match_prefix`` returns.

Mirrors ``sglang/srt/mem_cache/base_prefix_cache.py``. Three caches implement it: ``RadixCache``
(SGLang's tree, and ``FastRadixCache``, the same tree with a faster walk), ``HashBlockCache`` (vLLM's
chained block hashes, inside the engine) and ``ChunkCache`` (no reuse). The scheduler and the
request helpers (``mem_cache.common``) call only what is written here, so they never probe a cache
with ``getattr``. Differences from SGLang: plain arguments instead of its ``*Params`` / ``*Result``
dataclasses (``match_prefix(key, req)`` rather than ``match_prefix(MatchPrefixParams(key, req))``;
lock and evict methods return an int); ``caches_on_alloc`` declares the one behaviour SGLang's
caches do not have (vLLM's: full blocks enter the cache when they are allocated).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

if TYPE_CHECKING:
    from .common import Request
    from .radix_key import RadixKey


@dataclass
class MatchResult:
    """What ``match_prefix`` returns: the cached slot indices and the node where the match ends."""

    device_indices: torch.Tensor
    last_node: Any

    @property
    def last_device_node(self) -> Any:  # SGLang's field name
        return self.last_node

    def __len__(self) -> int:
        return len(self.device_indices)


class BasePrefixCache(ABC):
    """A prefix cache over KV slot indices, as the scheduler sees it.

    ``root_node`` is a node no request needs to lock; ``page_size`` is what a match is aligned to.
    ``token_to_kv_pool_allocator`` receives the slots the cache frees; ``req_to_token_pool`` holds
    the request rows that ``cache_*_req`` read and rewrite.
    """

    caches_on_alloc: ClassVar[bool] = False
    """True for a cache whose full blocks enter it when they are allocated, before their KV is
    computed (vLLM's): the scheduler then calls ``cache_at_allocation`` at admission."""

    page_size: int
    root_node: Any
    token_to_kv_pool_allocator: Any
    req_to_token_pool: Any

    @abstractmethod
    def reset(self) -> None:
        """Forget every cached entry. Slots are not returned to the allocator."""

    @abstractmethod
    def match_prefix(self, key: RadixKey, req: Request | None = None) -> MatchResult:
        """Longest cached, aligned prefix of ``key``. May refresh access times and split a node so
        that ``last_node`` ends exactly at the match; frees and locks nothing. ``req``, when given, is
        the request the key belongs to: a cache may keep per-request state on it (``block_hashes``)."""

    @abstractmethod
    def inc_lock_ref(self, node: Any) -> int:
        """Protect ``node`` and its ancestors from eviction; returns the change in evictable tokens
        (<= 0). Changes only lock counts and the size counters."""

    @abstractmethod
    def dec_lock_ref(self, node: Any) -> int:
        """Undo one ``inc_lock_ref(node)``; returns the change in evictable tokens (>= 0). Raises,
        changing nothing, if ``node`` (or a node on its path) holds no lock to undo."""

    @abstractmethod
    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` cached tokens no request locks (fewer if there are not
        enough); gives their slots to the allocator; returns how many were freed."""

    @abstractmethod
    def evictable_size(self) -> int:
        """Cached tokens no live request locks (what ``evict`` could free). Reads only."""

    @abstractmethod
    def protected_size(self) -> int:
        """Cached tokens locked by at least one live request. Reads only."""

    @abstractmethod
    def total_size(self) -> int:
        """Cached tokens in all. Reads only."""

    @abstractmethod
    def cache_finished_req(self, req: Request, is_insert: bool = True, kv_len_to_handle: int | None = None) -> None:
        """A finished request hands over its row: afterwards each of its slots is the cache's or
        free, its lock is dropped and it is marked finished. The caller frees the row itself."""

    @abstractmethod
    def cache_unfinished_req(self, req: Request, chunked: bool = False) -> None:
        """After a prefill (chunk): the cache may adopt the KV computed so far; the request's row,
        ``prefix_indices``, ``cache_protected_len`` and lock move to what the cache now holds."""

    def cache_at_allocation(self, req: Request) -> None:
        """Only for ``caches_on_alloc`` caches: the request's just-allocated full blocks join the
        cache now, locked by the request."""
        raise NotImplementedError(f"{type(self).__name__} does not cache blocks at allocation")

    def check_invariants(self) -> None:
        """Raise AssertionError if the cache's bookkeeping is inconsistent (the tests call it after
        every step; here go the checks too costly for the hot path). Reads only."""
