"""``FastRadixCache``: the same radix tree, walked over the query's packed bytes (notebook 11).

``RadixCache`` walks tuples of ints and slices a new key per edge (what notebooks 01-06 explain).
This subclass overrides its two walks, ``_match_prefix_helper`` and ``_insert_helper``: ``pos`` is a
byte offset into ``key.packed`` (8 bytes a token) and an edge matches whole when
``packed.startswith(edge, pos)``: one ``memcmp``, no slicing of the query, no boxed ints. Splits,
new leaves (``_add_leaf``), locks and eviction are the base class's. Both leave identical trees
(tests/test_radix_fast.py); the engine and the benchmarks use this one. SGLang's own fast tree is a
C++ extension (``radix_cache_cpp.py``); this is pure Python, as fast as a Python walk gets.
"""

from __future__ import annotations

import torch

from .radix_cache import RadixCache, TreeNode
from .radix_key import ITEM, RadixKey, key_over, packed_prefix_len


class FastRadixCache(RadixCache):
    """``RadixCache`` with the packed-bytes walks. In the bigram view an edge of u units holds u+1
    raw tokens and the next edge starts one token before its end (``overlap``)."""

    def _match_prefix_helper(self, node: TreeNode, key: RadixKey) -> tuple[list[torch.Tensor], TreeNode]:
        now = self._tick()
        node.last_access_time = now
        packed, ns, page = key.packed, key.extra_key, self.page_size
        overlap = ITEM if key.is_bigram else 0
        width, end = page * ITEM + overlap, len(packed) - overlap
        values: list[torch.Tensor] = []
        pos = 0
        while pos < end:
            first = packed[pos:pos + width]  # the next unit (or page): which child edge to follow
            child = node.children.get(first if ns is None else (ns, first))
            if child is None:
                break
            child.last_access_time = now
            edge = child.key.packed
            if packed.startswith(edge, pos):  # the whole edge matches: take its slots, go down
                values.append(child.value)
                node = child
                pos += len(edge) - overlap
                continue
            units = packed_prefix_len(edge, packed, pos) - (1 if overlap else 0)
            new_node = self._split_node(child.key, child, units // page * page)
            values.append(new_node.value)
            return values, new_node
        return values, node

    def _insert_helper(self, node: TreeNode, key: RadixKey, value: torch.Tensor,
                       priority: int = 0, chunked: bool = False) -> tuple[int, TreeNode]:
        now = self._tick()
        node.last_access_time = now
        packed, ns, page = key.packed, key.extra_key, self.page_size
        overlap = ITEM if key.is_bigram else 0
        width, end = page * ITEM + overlap, len(packed) - overlap
        pos = 0
        while pos < end:
            first = packed[pos:pos + width]
            child = node.children.get(first if ns is None else (ns, first))
            if child is None:
                break
            child.last_access_time = now
            edge = child.key.packed
            if packed.startswith(edge, pos):
                pos += len(edge) - overlap
            else:  # diverged inside the edge: split so the shared part is its own node
                units = (packed_prefix_len(edge, packed, pos) - (1 if overlap else 0)) // page * page
                child = self._split_node(child.key, child, units)
                pos += units * ITEM
            if not chunked:
                child.hit_count += 1
            if priority > child.priority:
                child.priority = priority
            node = child
        prefix_len = pos >> 3
        if pos < end:  # the rest is new: one leaf with a private copy of its slot indices
            node = self._add_leaf(node, first if ns is None else (ns, first), key_over(packed[pos:], ns, key.is_bigram),
                                  value.narrow_copy(0, prefix_len, (end - pos) >> 3), priority, chunked)
        return prefix_len, node
