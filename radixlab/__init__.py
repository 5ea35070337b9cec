"""radixlab: a runnable course on KV-cache reuse in LLM serving (SGLang's RadixAttention)."""

__version__ = "0.1.0"

from .mem_cache import (FastRadixCache, MatchResult, MHATokenToKVPool, RadixCache, RadixKey,  # noqa: E402
                        ReqToTokenPool, TokenToKVPoolAllocator, TreeNode)
from .tree import RadixNode, RadixTree  # noqa: E402

__all__ = ["RadixTree", "RadixNode", "RadixCache", "FastRadixCache", "RadixKey", "TreeNode", "MatchResult",
           "ReqToTokenPool", "MHATokenToKVPool", "TokenToKVPoolAllocator", "__version__"]
