"""What a radix cache shows about itself: its nodes, sizes, a stable text form and its invariants.

A mixin of ``RadixCache`` (read-only methods, none on the hot path). SGLang keeps the same methods
(``total_size``, ``pretty_print``) in ``radix_cache.py``; ``format`` is the text nbval compares,
``index_memory`` measures the index storage that notebook 02's split keeps alive or frees, and
``check_invariants`` holds the checks the tests run after every step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from .utils import describe_node

if TYPE_CHECKING:
    from .radix_cache import TreeNode


class RadixTreeViews:
    """Read-only views of a ``RadixCache`` (``root_node``, ``page_size`` and the size counters)."""

    def total_size(self) -> int:
        """Cached units over all nodes."""
        return sum(len(n.key) for n in self.nodes())

    def evictable_leaves(self) -> list[TreeNode]:
        """Leaves with ``lock_ref == 0``, in tree order: what ``evict`` may take next."""
        return [n for n in self.nodes() if n in self.evictable_leaves_]

    def nodes(self) -> Iterator[TreeNode]:
        """Every node below the root, depth first, children in insertion order."""
        stack = list(reversed(self.root_node.children.values()))
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children.values()))

    def num_nodes(self) -> int:
        return sum(1 for _ in self.nodes())

    def format(self, max_tokens: int = 8) -> str:
        """A stable text form of the tree (what notebooks compare; the SVG is for people)."""
        lines = [f"root  (#tokens={self.total_size()}, evictable={self.evictable_size_}, "
                 f"protected={self.protected_size_})"]

        def walk(node: TreeNode, prefix: str) -> None:
            kids = list(node.children.values())
            for i, child in enumerate(kids):
                last = i == len(kids) - 1
                lines.append(prefix + ("└─ " if last else "├─ ") + describe_node(child, max_tokens))
                walk(child, prefix + ("   " if last else "│  "))

        walk(self.root_node, "")
        return "\n".join(lines)

    def pretty_print(self) -> None:
        print(self.format())

    def check_invariants(self) -> None:
        """Raise AssertionError if any structural invariant is broken (used by the tests)."""
        evictable = protected = 0
        for node in self.nodes():
            assert node.parent is not None and node.parent.children.get(node.key.child_key(self.page_size)) is node
            assert len(node.key) > 0 and len(node.value) == len(node.key), f"node {node.id}: key/value length"
            assert len(node.key) % self.page_size == 0, f"node {node.id}: key not page-aligned"
            if node.parent is not self.root_node:
                assert node.key.extra_key == node.parent.key.extra_key, "namespaces mixed on a path"
            assert node.lock_ref >= sum(c.lock_ref for c in node.children.values()) >= 0, \
                f"node {node.id}: fewer locks than its children hold (lock_ref grows downwards)"
            if node.lock_ref:
                protected += len(node.key)
            else:
                evictable += len(node.key)
        assert (evictable, protected) == (self.evictable_size_, self.protected_size_), "size counters drifted"
        leaves = {n for n in self.nodes() if not n.children and n.lock_ref == 0}
        assert self.evictable_leaves_ == leaves, "evictable_leaves_ out of date"

    def index_memory(self) -> tuple[int, int]:
        """(bytes the tree's slot indices need, bytes their storages hold), over live nodes.

        Equal when every node owns exactly its own indices; more held than needed means some node's
        index tensor is a view keeping a bigger, partly evicted storage alive (notebook 02).
        """
        need, held, seen = 0, 0, set()
        for node in self.nodes():
            if node.value is None:
                continue
            need += node.value.numel() * node.value.element_size()
            storage = node.value.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                held += storage.nbytes()
        return need, held
