"""Instructor answer of exercise 05.1 (never imported by a notebook nor by the grader's executor)."""

from __future__ import annotations

from typing import Any

from ..mem_cache import RadixKey


def reference_cache_finished_req(cache: Any, req: Any) -> None:
    """The hand-over of ``RadixCache.cache_finished_req``: insert, free duplicates and the tail, unlock."""
    allocator = cache.token_to_kv_pool_allocator
    kv = cache.req_to_token_pool.req_to_token[req.req_pool_idx, : req.seq_len]
    tokens = (req.origin_input_ids + req.output_ids)[: req.seq_len]  # only tokens whose KV is in the row
    key_len = len(tokens) // cache.page_size * cache.page_size  # whole pages only
    prefix_len = cache.insert(RadixKey(tokens[:key_len], req.extra_key), kv[:key_len].clone())
    allocator.free(kv[req.cache_protected_len:prefix_len])  # our copies of tokens the tree already had
    allocator.free(kv[key_len:])  # the unaligned tail
    cache.dec_lock_ref(req.last_node)  # the lock admit took
