"""radixlab: a runnable course on KV-cache reuse in LLM serving (SGLang's RadixAttention)."""

__version__ = "0.1.0"

from .radix_cache import MatchResult, RadixCache, RadixKey, TreeNode  # noqa: E402
from .tree import RadixNode, RadixTree  # noqa: E402

__all__ = ["RadixTree", "RadixNode", "RadixCache", "RadixKey", "TreeNode", "MatchResult", "__version__"]
