"""``ChunkCache``: the cache used when the radix cache is off (``disable_radix_cache=True``).

Mirrors ``sglang/srt/mem_cache/chunk_cache.py``: it implements ``BasePrefixCache`` but remembers nothing.
``match_prefix`` always returns an empty prefix, a finished request frees every slot of its row, and
between the chunks of a chunked prefill the request simply keeps its own slots. This is the
"no cache" baseline of ``python -m radixlab bench prefill`` and notebook 07.
"""

from __future__ import annotations

from typing import Any

import torch

from ..utils.checks import check_int
from .base_prefix_cache import BasePrefixCache, MatchResult
from .radix_key import RadixKey
from .tree_node import TreeNode


class ChunkCache(BasePrefixCache):
    """The prefix-cache interface with no reuse: every request computes its whole prompt."""

    def __init__(self, page_size: int, *, token_to_kv_pool_allocator: Any, req_to_token_pool: Any,
                 device: str | torch.device = "cpu") -> None:
        self.page_size = check_int(page_size, "page_size", 1)
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.req_to_token_pool = req_to_token_pool
        self.device = torch.device(device)
        self.reset()

    def reset(self) -> None:
        self.root_node = TreeNode(0, RadixKey(()), torch.empty(0, dtype=torch.int64), None, 0)
        self.root_node.lock_ref = 1

    def match_prefix(self, key: Any, req: Any = None) -> MatchResult:
        return MatchResult(torch.empty(0, dtype=torch.int64, device=self.device), self.root_node)

    def inc_lock_ref(self, node: TreeNode) -> int:
        return 0

    def dec_lock_ref(self, node: TreeNode) -> int:
        return 0

    def evict(self, num_tokens: int) -> int:
        return 0

    def evictable_size(self) -> int:
        return 0

    def protected_size(self) -> int:
        return 0

    def total_size(self) -> int:
        return 0

    def cache_finished_req(self, req: Any, is_insert: bool = True, kv_len_to_handle: int | None = None) -> None:
        """Free every slot the request's row holds (nothing is kept for later requests)."""
        row = self.req_to_token_pool.req_to_token[req.req_pool_idx, :req.seq_len]
        self.token_to_kv_pool_allocator.free(row)
        req.last_node = None
        req.cache_protected_len = 0
        req.prefix_indices = torch.empty(0, dtype=torch.int64, device=self.device)
        req.finished = True

    def cache_unfinished_req(self, req: Any, chunked: bool = False) -> None:
        """Between chunks the request keeps its own slots: they are its prefix for the next chunk."""
        req.prefix_indices = self.req_to_token_pool.row(req.req_pool_idx, req.seq_len)
