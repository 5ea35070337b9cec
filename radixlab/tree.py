"""The teaching radix tree (the seed lesson's model): RadixNode, insert, match_prefix, _split and ref counts.

This is the seed lesson's own model, kept exactly: a compressed trie whose nodes hold a key (a run
of tokens), an optional value (the KV of the whole prefix ending here), children keyed by their
first token, and a ``ref`` count of request paths that pass through or end at the node.
Notebooks 01_radix_tree and 02_cow_split teach it; ``radixlab.mem_cache.radix_cache`` is the SGLang-style
version with slot indices, pages, namespaces and lock references.
"""

from __future__ import annotations

from typing import Any, Hashable, Iterator, Sequence


def common_prefix_len(a: Sequence, b: Sequence) -> int:
    """Number of leading positions where ``a`` and ``b`` agree."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class RadixNode:
    """One node of the teaching tree: an edge label ``key`` plus what hangs below it."""

    __slots__ = ("key", "value", "children", "ref")

    def __init__(self, key: Sequence[Hashable] = (), value: Any = None,
                 children: dict | None = None, ref: int = 0) -> None:
        self.key: list = list(key)
        self.value = value
        self.children: dict[Hashable, RadixNode] = {} if children is None else children
        self.ref = ref

    def __repr__(self) -> str:
        marker = "None" if self.value is None else "<kv>"
        return f"RadixNode(key={self.key!r}, ref={self.ref}, value={marker}, children={len(self.children)})"


class RadixTree:
    """The seed's RadixTree. ``ref`` only ever grows: the seed leaves release unimplemented (Q2)."""

    def __init__(self) -> None:
        self.root = RadixNode()

    # -- the three operations of the lesson -------------------------------------------------

    def insert(self, tokens: Sequence[Hashable], value: Any) -> None:
        """Insert ``tokens`` with ``value``; every node on the path gets ``ref += 1``."""
        tokens = _check_tokens(tokens)
        if not tokens:
            raise ValueError("tokens must be non-empty, got []")
        node, i = self.root, 0
        while i < len(tokens):
            tok = tokens[i]
            # 1. No child starts with this token: hang the whole rest as a new leaf, ref=1.
            if tok not in node.children:
                node.children[tok] = RadixNode(tokens[i:], value, ref=1)
                return
            child = node.children[tok]
            # 2. Walk along the child's edge as far as the tokens agree.
            j = common_prefix_len(child.key, tokens[i:])
            # 3. Diverged inside the edge: split it there (the copy-on-write fork point).
            if j < len(child.key):
                self._split(child, j)
            # 4. This request's path passes through (or ends at) the child.
            child.ref += 1
            i += j
            node = child
        # 5. The tokens ended exactly on a node boundary: that node now holds the value.
        node.value = value

    def match_prefix(self, tokens: Sequence[Hashable]) -> tuple[int, Any]:
        """Longest inserted prefix of ``tokens`` that ends at a node holding a value."""
        tokens = _check_tokens(tokens)
        node, i = self.root, 0
        hit_len, hit_val = 0, None
        while i < len(tokens) and tokens[i] in node.children:
            child = node.children[tokens[i]]
            j = common_prefix_len(child.key, tokens[i:])
            # The query ends (or differs) inside this edge: no node boundary here, stop.
            if j < len(child.key):
                break
            i += j
            if child.value is not None:
                hit_len, hit_val = i, child.value
            node = child
        return hit_len, hit_val

    def _split(self, node: RadixNode, idx: int) -> RadixNode:
        """Cut ``node``'s edge at ``idx``: ``node`` keeps the common prefix, a new child the rest."""
        if not 0 < idx < len(node.key):
            raise ValueError(f"idx must be inside the edge (0 < idx < {len(node.key)}), got {idx}")
        # 1. Save the fork token first: after truncation node.key[idx] no longer exists (Q3).
        split_tok = node.key[idx]
        # 2. The suffix child takes over everything below the cut: value, children and ref.
        suffix_child = RadixNode(node.key[idx:], node.value)
        suffix_child.children = node.children
        suffix_child.ref = node.ref
        # 3. Truncate the original node to the common prefix; internal nodes hold no KV.
        node.key = node.key[:idx]
        node.value = None
        # 4. Its only child is the suffix (assigned once).
        node.children = {split_tok: suffix_child}
        return suffix_child

    # -- inspection ---------------------------------------------------------------------------

    def nodes(self) -> Iterator[tuple[int, RadixNode]]:
        """Depth-first (depth, node) pairs below the root, children in insertion order."""
        stack = [(1, c) for c in reversed(list(self.root.children.values()))]
        while stack:
            depth, node = stack.pop()
            yield depth, node
            stack.extend((depth + 1, c) for c in reversed(list(node.children.values())))

    def num_nodes(self) -> int:
        """Nodes below the root."""
        return sum(1 for _ in self.nodes())

    def find(self, path: Sequence[Hashable]) -> RadixNode:
        """The node whose root-to-node key concatenation equals ``path``."""
        node, i = self.root, 0
        path = list(path)
        while i < len(path):
            child = node.children.get(path[i])
            if child is None or path[i:i + len(child.key)] != child.key:
                raise KeyError(f"no node ends at path {path!r}")
            i += len(child.key)
            node = child
        return node

    def format(self) -> str:
        """The seed's tree overview, as text: ``key=[...]  ref=N  value=None|<kv>``."""
        lines = ["root"]
        for depth, node in self.nodes():
            marker = "None" if node.value is None else "<kv>"
            lines.append("   " * (depth - 1) + f"└─ key={node.key!r}  ref={node.ref}  value={marker}")
        return "\n".join(lines)


def _check_tokens(tokens: Sequence[Hashable]) -> list:
    if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__len__"):
        raise TypeError(f"tokens must be a sequence of tokens, got {type(tokens).__name__}")
    tokens = list(tokens)
    for t in tokens:
        if not isinstance(t, Hashable):
            raise TypeError(f"tokens must be hashable, got {type(t).__name__}")
    return tokens


class PlainTrie:
    """An uncompressed trie, one node per token: the baseline of seed Q1."""

    def __init__(self) -> None:
        self.root: dict = {}
        self._count = 0

    def insert(self, tokens: Sequence[Hashable]) -> None:
        node = self.root
        for t in _check_tokens(tokens):
            if t not in node:
                node[t] = {}
                self._count += 1
            node = node[t]

    def num_nodes(self) -> int:
        return self._count
