"""A request and the scheduler's side of the KV-ownership contract (notebook 05_request_lifecycle_and_locks).

SGLang keeps these helpers in ``mem_cache/common.py`` (``evict_from_tree_cache``,
``release_kv_cache``) and ``mem_cache/allocation.py`` (``alloc_for_extend``), for a whole batch at
a time; here they take one request, one step each. ``Request`` carries the KV-ownership fields of
SGLang's ``Req`` (``origin_input_ids``, ``output_ids``, ``fill_ids`` (v0.5.17 computes it: ``Req.get_fill_ids()``), ``extra_key``,
``req_pool_idx``, ``prefix_indices``, ``last_node``, ``cache_protected_len``); the engine's ``Req``
adds serving fields. Any ``BasePrefixCache`` works:

1. ``admit``: ``match_prefix`` → ``inc_lock_ref(last_node)`` → take a ``ReqToTokenPool`` row and
   write the cached prefix's slots into it.
2. ``extend``: allocate slots for the next tokens (evicting from the cache if the pool is short)
   and write them into the row. Used for prefill, each chunk of a chunked prefill, and decode.
3. ``RadixCache.cache_unfinished_req`` after a prefill chunk (the tree adopts the KV so far).
4. ``release``: ``RadixCache.cache_finished_req`` (insert, free duplicates and the unaligned tail,
   unlock), then give the row back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Hashable, Sequence

import torch

from ..utils.checks import check_int
from .base_prefix_cache import MatchResult
from .radix_key import ITEM, RadixKey, _as_token_tuple, pack_tokens, unpack_tokens

if TYPE_CHECKING:
    from .base_prefix_cache import BasePrefixCache
    from .tree_node import TreeNode


@dataclass(eq=False)
class Request:
    """One generation request, as the cache and the pools see it."""

    rid: str
    origin_input_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    extra_key: Hashable | None = None
    priority: int = 0
    # Filled in by the scheduler:
    fill_ids: list[int] = field(default_factory=list)  # tokens whose KV slots are in the row, in order
    req_pool_idx: int | None = None
    prefix_indices: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.int64))
    last_node: TreeNode | None = None  # the node this request holds a lock on
    cache_protected_len: int = 0  # leading row entries that are the tree's slots (not this request's)
    finished: bool = False
    # full-block chain hashes of all_ids, kept as vLLM keeps them (HashBlockCache reads and extends them)
    block_hashes: list = field(default_factory=list, repr=False)
    # origin_input_ids packed as int64 bytes, once (the cache's key form: notebook 11), and the list packed
    _origin_packed: bytes = field(default=b"", repr=False)
    _origin_src: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        packed = pack_tokens(self.origin_input_ids, "origin_input_ids")  # validates every id, once
        if type(self.origin_input_ids) is not list:
            self.origin_input_ids = list(unpack_tokens(packed))
        self._origin_packed, self._origin_src = packed, self.origin_input_ids
        self.output_ids = list(_as_token_tuple(self.output_ids, "output_ids"))
        if not self.origin_input_ids:
            raise ValueError("origin_input_ids must be non-empty")

    @property
    def all_ids(self) -> list[int]:
        return self.origin_input_ids + self.output_ids

    @property
    def seq_len(self) -> int:
        """Tokens whose KV is in the row (= ``len(fill_ids)``)."""
        return len(self.fill_ids)

    def radix_key(self, tokens: Sequence[int] | None = None) -> RadixKey:
        return RadixKey(self.all_ids if tokens is None else tokens, self.extra_key)

    def admit_key(self) -> RadixKey:
        """What ``admit`` (and a scheduler peeking before it) matches: the prompt minus its last token,
        whose logits are the first output. Built from the packed prompt: no list conversion."""
        return RadixKey.from_packed(self.packed_ids(len(self.origin_input_ids) - 1), self.extra_key)

    def packed_ids(self, n: int) -> bytes:
        """The first ``n`` tokens of ``origin_input_ids + output_ids`` as packed int64 bytes.

        The prompt was packed once, at creation; output ids are packed only when a key reaches
        them (``cache_finished_req``). So the request path converts each token list once.
        Assigning a new ``origin_input_ids`` list is seen (it is packed again); editing the list in
        place is not supported (SGLang's scheduler never edits a prompt either).
        """
        packed = self._origin_packed
        if self._origin_src is not self.origin_input_ids or len(packed) != len(self.origin_input_ids) * ITEM:
            packed = self._origin_packed = pack_tokens(self.origin_input_ids, "origin_input_ids")
            self._origin_src = self.origin_input_ids
        n_origin = len(self.origin_input_ids)
        if n <= n_origin:
            return packed[: n * ITEM]
        return packed + pack_tokens(self.output_ids[: n - n_origin], "output_ids")

    def __repr__(self) -> str:
        node = None if self.last_node is None else self.last_node.id
        return (f"Request({self.rid!r}, {len(self.origin_input_ids)}+{len(self.output_ids)} tokens, "
                f"seq_len={self.seq_len}, row={self.req_pool_idx}, cached_prefix={len(self.prefix_indices)}, "
                f"cache_protected_len={self.cache_protected_len}, last_node={node})")


def _pools(cache: BasePrefixCache) -> tuple[Any, Any]:
    if cache.req_to_token_pool is None or cache.token_to_kv_pool_allocator is None:
        raise ValueError("cache needs req_to_token_pool and token_to_kv_pool_allocator for the request lifecycle")
    return cache.req_to_token_pool, cache.token_to_kv_pool_allocator


def admit(req: Request, cache: BasePrefixCache, on_match: Callable[[MatchResult], None] | None = None) -> int:
    """Steps match → lock → row: returns how many leading tokens the cache already holds.

    Raises RuntimeError (before any lock is taken) if no row is free. ``on_match(result)`` is called
    between the match and the lock (notebook 05 draws the tree there).
    """
    req_to_token_pool, _ = _pools(cache)
    if req.finished:
        raise ValueError(f"request {req.rid!r} has finished: its KV belongs to the cache now, make a new Request")
    if req.req_pool_idx is not None:
        raise ValueError(f"request {req.rid!r} is already admitted (row {req.req_pool_idx})")
    if req_to_token_pool.available_size() == 0:
        req_to_token_pool.alloc()  # raises the pool's "full" error
    # 1. Longest cached, page-aligned prefix. Keep one token to compute: its logits are the output.
    result = cache.match_prefix(req.admit_key(), req)
    if on_match is not None:
        on_match(result)
    # 2. Lock it: from now on evict() cannot take these slots away from us.
    cache.inc_lock_ref(result.last_node)
    # 3. A row of our own; its head points at the tree's slots.
    req.req_pool_idx = req_to_token_pool.alloc()
    req_to_token_pool.write(req.req_pool_idx, 0, result.device_indices)
    req.prefix_indices = result.device_indices.clone()
    req.last_node = result.last_node
    req.cache_protected_len = len(result.device_indices)
    req.fill_ids = req.origin_input_ids[: req.cache_protected_len]
    return req.cache_protected_len


def extend(req: Request, cache: BasePrefixCache, num_tokens: int | None = None,
           on_evict: Callable[[int], None] | None = None) -> bool:
    """Allocate and write slots for the next ``num_tokens`` tokens (default: the rest of the prompt).

    The token ids come from ``origin_input_ids + output_ids`` (append to ``output_ids`` first to
    decode). If the allocator is short, the cache evicts just enough unlocked leaves
    (``on_evict(tokens evicted)`` is called then); if it is still short, returns False and the
    request is unchanged.
    """
    req_to_token_pool, allocator = _pools(cache)
    if req.req_pool_idx is None:
        raise ValueError(f"request {req.rid!r} has no row: admit it first")
    target = req.all_ids
    if num_tokens is None:
        num_tokens = max(len(req.origin_input_ids) - req.seq_len, 0)
    num_tokens = check_int(num_tokens, "num_tokens (tokens not yet in the row)", 0, len(target) - req.seq_len)
    if num_tokens == 0:
        return True
    start = req.seq_len
    if alloc_at(cache, req.req_pool_idx, start, num_tokens, on_evict) is None:
        return False
    req.fill_ids = target[: start + num_tokens]
    return True


def alloc_at(cache: BasePrefixCache, row: int, start: int, num_tokens: int,
             on_evict: Callable[[int], None] | None = None) -> torch.Tensor | None:
    """Slots for positions ``start .. start + num_tokens - 1`` of request row ``row``, written into it;
    they continue the page of the row's slot at ``start - 1``. When the allocator is short the cache
    evicts just enough unlocked leaves (``on_evict(tokens evicted)``; SGLang: ``evict_from_tree_cache``);
    None if it is still short (the row unchanged). ``extend`` uses it, and the overlap scheduler,
    which allocates ahead of the tokens it has seen."""
    req_to_token_pool, allocator = _pools(cache)
    last_loc = int(req_to_token_pool.req_to_token[row, start - 1]) if start else -1
    slots = allocator.alloc_extend(start, last_loc, num_tokens)
    if slots is None:  # the pool is short: evict unlocked leaves
        room = min((-start) % allocator.page_size, num_tokens)
        need = -(-(num_tokens - room) // allocator.page_size) * allocator.page_size
        evicted = cache.evict(need - allocator.available_size())
        if on_evict is not None:
            on_evict(evicted)
        slots = allocator.alloc_extend(start, last_loc, num_tokens)
        if slots is None:
            return None
    req_to_token_pool.write(row, start, slots)
    return slots


def release(req: Request, cache: BasePrefixCache, on_cached: Callable[[], None] | None = None) -> None:
    """The request is done: the cache adopts its KV, the lock goes, the row goes back.

    ``on_cached()`` is called after ``cache_finished_req`` and before the row is freed.
    """
    req_to_token_pool, _ = _pools(cache)
    if req.req_pool_idx is None:
        raise ValueError(f"request {req.rid!r} holds no row (never admitted, or released twice)")
    cache.cache_finished_req(req)
    if on_cached is not None:
        on_cached()
    req_to_token_pool.free(req.req_pool_idx)
    req.req_pool_idx = None  # cache_finished_req marked the request finished
