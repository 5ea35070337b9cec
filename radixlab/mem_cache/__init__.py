"""The KV cache's bookkeeping, laid out as SGLang's ``srt/mem_cache/`` (notebooks 01-07, 11).

``base_prefix_cache`` (the interface every prefix cache implements, ``MatchResult``), ``radix_key``,
``radix_cache`` (``RadixCache``, the readable walk; ``tree_node``, ``radix_views``),
``fast_radix_cache`` (``FastRadixCache``, the packed-bytes walk the engine uses), ``evict_policy``,
``memory_pool`` (``ReqToTokenPool``, ``MHATokenToKVPool``), ``allocator``
(``TokenToKVPoolAllocator``), ``chunk_cache`` (no reuse), ``hash_cache`` (the chained-hash baseline
of notebook 03), ``hash_block_cache`` (vLLM's block cache inside the engine) and ``common`` (a
``Request`` and its admit / extend / release). Nothing here imports ``radixlab.engine``.
"""

from .allocator import TokenToKVPoolAllocator
from .base_prefix_cache import BasePrefixCache, MatchResult
from .chunk_cache import ChunkCache
from .common import Request, admit, alloc_at, extend, release
from .evict_policy import EVICTION_POLICIES
from .fast_radix_cache import FastRadixCache
from .hash_block_cache import HashBlock, HashBlockCache
from .hash_cache import HashMatch, HashPrefixCache, RequestBlockHashes, block_hash_input, chain_hashes
from .memory_pool import MHATokenToKVPool, ReqToTokenPool
from .radix_cache import RadixCache
from .radix_key import RadixKey
from .tree_node import TreeNode

__all__ = ["BasePrefixCache", "MatchResult", "RadixKey", "TreeNode", "RadixCache", "FastRadixCache",
           "EVICTION_POLICIES", "ReqToTokenPool", "MHATokenToKVPool", "TokenToKVPoolAllocator", "ChunkCache",
           "HashPrefixCache", "HashMatch", "RequestBlockHashes", "chain_hashes", "block_hash_input",
           "HashBlockCache", "HashBlock", "Request", "admit", "extend", "alloc_at", "release"]
