"""The SGLang-style radix cache: TreeNode, MatchResult and RadixCache (RadixKey is in radix_key.py).

Mirrors ``sglang/srt/mem_cache/radix_cache.py``: a radix tree whose nodes map a run of tokens
(``key``) to the KV-pool slot indices that hold their K/V (``value``, an int64 tensor with one
slot per token). Children are keyed by the first token (or first page) *and* the ``extra_key``,
so two namespaces never share a node. Notebooks: 01_radix_tree (shape), 03_hash_vs_radix,
04_pages_and_namespaces (pages, extra_key, bigrams), 05_request_lifecycle_and_locks (locks), 06_eviction (evict).

Two matchers walk the same tree (``RadixCache(matcher=...)``): ``"readable"`` is the one the
notebooks explain (tuples of ints, ``RadixKey.match``, a new key slice per edge); ``"fast"``, the
default, walks the query's packed bytes with an offset: one ``memcmp`` per edge, no key slices, no
boxed ints (notebook 11 measures both against SGLang's own tree). They give identical results and
leave identical trees (tests/test_radix_fast.py).

Choices that differ from SGLang, on purpose:
* ``last_access_time`` is a logical clock (one tick per match/insert), not ``time.monotonic()``,
  so eviction order and every drawing are reproducible in a notebook. Ties on it are broken the
  way SGLang's clock orders the same events: within one tick, the nodes a walk stamped come before
  the nodes it created, in creation order, i.e. by node id (``TreeNode.__lt__``; the policies that
  prefer the newest negate the id too). tests/test_sglang_differential.py checks this against
  SGLang's own RadixCache with its ``time.monotonic`` replaced by a counter.
* node ids count from 1 per cache (``reset()`` restarts them) so graphviz ids are deterministic.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from numbers import Integral
from typing import Any, Callable, Iterator, Sequence

import torch

from .evict_policy import EVICTION_POLICIES, _resolve_policy  # noqa: F401  (re-exported)
from .radix_key import (ITEM, RadixKey, _as_token_tuple, common_prefix_len,  # noqa: F401  (re-exported)
                        is_index_dtype, key_over, pack_tokens, packed_prefix_len)

MATCHERS = ("fast", "readable")

# ---------------------------------------------------------------------------------------------
# TreeNode and MatchResult
# ---------------------------------------------------------------------------------------------


class TreeNode:
    """A radix-tree node: ``key`` (RadixKey) → ``value`` (int64 slot indices, one per unit)."""

    __slots__ = ("id", "key", "value", "children", "parent", "lock_ref", "last_access_time",
                 "creation_time", "hit_count", "priority")

    def __init__(self, node_id: int, key: RadixKey, value: torch.Tensor | None,
                 parent: TreeNode | None, now: int, priority: int = 0) -> None:
        self.id = node_id
        self.key = key
        self.value = value
        self.children: dict[tuple, TreeNode] = {}
        self.parent = parent
        self.lock_ref = 0
        self.last_access_time = now
        self.creation_time = now
        self.hit_count = 0
        self.priority = priority

    @property
    def evicted(self) -> bool:
        return self.value is None

    def __lt__(self, other: TreeNode) -> bool:  # heap tie-break: older node first
        return self.id < other.id

    def __repr__(self) -> str:
        return (f"TreeNode(id={self.id}, key={self.key!r}, lock_ref={self.lock_ref}, "
                f"last_access_time={self.last_access_time})")


@dataclass
class MatchResult:
    """What ``match_prefix`` returns: the cached slot indices and the node where the match ends."""

    device_indices: torch.Tensor
    last_node: TreeNode

    @property
    def last_device_node(self) -> TreeNode:  # SGLang's field name
        return self.last_node

    def __len__(self) -> int:
        return len(self.device_indices)


# ---------------------------------------------------------------------------------------------
# RadixCache
# ---------------------------------------------------------------------------------------------


class RadixCache:
    """A prefix cache over KV slot indices, with SGLang's method names.

    ``token_to_kv_pool_allocator`` (optional) receives the slots that ``evict`` frees;
    ``req_to_token_pool`` is used by ``cache_finished_req``/``cache_unfinished_req``.
    """

    def __init__(self, page_size: int = 1, *, token_to_kv_pool_allocator: Any = None,
                 req_to_token_pool: Any = None, eviction_policy: str | Callable = "lru",
                 is_eagle: bool = False, device: str | torch.device = "cpu", matcher: str = "fast") -> None:
        if isinstance(page_size, bool) or not isinstance(page_size, Integral):
            raise TypeError(f"page_size must be an int, got {type(page_size).__name__}")
        if page_size <= 0:
            raise ValueError(f"page_size must be positive, got {page_size}")
        self.page_size = int(page_size)
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.req_to_token_pool = req_to_token_pool
        self.eviction_policy = eviction_policy
        self._priority_fn = _resolve_policy(eviction_policy)
        self.is_eagle = bool(is_eagle)
        self.device = torch.device(device)
        if matcher not in MATCHERS:
            raise ValueError(f"matcher must be one of {MATCHERS}, got {matcher!r}")
        self.matcher = matcher
        self._empty_indices = torch.empty(0, dtype=torch.int64, device=self.device)
        self.reset()

    # -- public API ---------------------------------------------------------------------------

    def reset(self) -> None:
        """Drop every node (slots are *not* returned to an allocator: use ``evict`` for that)."""
        self._next_id = 0
        self._clock = 0
        self.root_node = self._new_node(RadixKey.from_packed(b""), torch.empty(0, dtype=torch.int64), None)
        self.root_node.lock_ref = 1  # the root is never evictable
        self.evictable_size_ = 0
        self.protected_size_ = 0
        # Unlocked leaves, kept up to date on every change (as SGLang's ``evictable_leaves``), so
        # ``evict`` starts from them instead of walking the whole tree.
        self.evictable_leaves_: set[TreeNode] = set()

    def match_prefix(self, key: RadixKey | Sequence[int]) -> MatchResult:
        """Longest cached, page-aligned prefix of ``key`` in its namespace.

        Like SGLang, a match that ends inside an edge splits that edge so that ``last_node`` is
        exactly where the match ends (the node a request then locks). Touched nodes get a fresh
        ``last_access_time``. ``device_indices`` is read-only: when the match is a single edge it
        is that node's own index tensor (no copy; SGLang copies with ``torch.cat`` even then).
        """
        key = self._prepare_key(key, "key")
        if self.page_size != 1:
            key = key.page_aligned(self.page_size)
        if len(key.packed) <= key.is_bigram * ITEM:  # no units (SGLang: no walk, no clock tick)
            return MatchResult(self._empty_indices, self.root_node)
        values, last_node = self._match_prefix_helper(self.root_node, key)
        if len(values) > 1:
            return MatchResult(torch.cat(values), last_node)
        return MatchResult(values[0] if values else self._empty_indices, last_node)

    def insert(self, key: RadixKey | Sequence[int], value: torch.Tensor | Sequence[int] | None = None,
               priority: int = 0, chunked: bool = False) -> int:
        """Insert ``key`` → ``value``; returns how many leading units were already cached.

        Only whole pages are stored. When ``value`` is None the token ids themselves are used as
        stand-in slot indices (SGLang's simulation fallback). The caller still owns the slots of
        the first ``prefix_len`` units: the tree kept its own copies (see ``cache_finished_req``).
        ``chunked=True`` (SGLang's ``InsertParams.chunked``) leaves ``hit_count`` alone: a chunked
        prefill re-inserting its own earlier chunks is not a hit (it would inflate LFU's counts).
        """
        prefix_len, _ = self._insert(key, value, priority, chunked)
        return prefix_len

    def inc_lock_ref(self, node: TreeNode) -> int:
        """Lock ``node`` and its ancestors against eviction; returns the change in evictable size."""
        self._check_in_tree(node, "node")
        delta = 0
        while node is not self.root_node:
            if node.lock_ref == 0:
                self.evictable_size_ -= len(node.key)
                self.protected_size_ += len(node.key)
                delta -= len(node.key)
            node.lock_ref += 1
            self._update_leaf_status(node)
            node = node.parent
        return delta

    def dec_lock_ref(self, node: TreeNode) -> int:
        """Undo one ``inc_lock_ref(node)``; returns the change in evictable size."""
        self._check_in_tree(node, "node")
        walk = node
        while walk is not self.root_node:  # check the whole path before changing anything
            if walk.lock_ref <= 0:
                raise ValueError(f"dec_lock_ref on node {walk.id} whose lock_ref is already 0 "
                                 "(unlocking a node that is not locked)")
            walk = walk.parent
        delta = 0
        while node is not self.root_node:
            if node.lock_ref == 1:
                self.evictable_size_ += len(node.key)
                self.protected_size_ -= len(node.key)
                delta += len(node.key)
            node.lock_ref -= 1
            self._update_leaf_status(node)
            node = node.parent
        return delta

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` cached tokens from unlocked leaves; returns tokens evicted.

        Heap eviction as in lesson 4 (and SGLang): gather every unlocked leaf, heapify by the
        policy key, pop the smallest, free its slots, delete it, and push its parent if that just
        became an unlocked leaf. Stops when enough is freed or nothing is evictable.
        """
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, Integral):
            raise TypeError(f"num_tokens must be an int, got {type(num_tokens).__name__}")
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        # 1. Every unlocked leaf is a candidate, keyed by the eviction policy (lru: oldest first).
        return self._evict_from_heap(self._evictable_heap(), num_tokens)

    def _evictable_heap(self) -> list[tuple[Any, TreeNode]]:
        """``(policy key, leaf)`` for every unlocked leaf, heapified: where ``evict`` starts."""
        heap = [(self._priority_fn(n), n) for n in self.evictable_leaves_]
        heapq.heapify(heap)
        return heap

    def _evict_from_heap(self, heap: list, num_tokens: int) -> int:
        """The loop of ``evict`` (exercise 06.1): pop, free, delete, push a parent that became a leaf."""
        evicted = 0
        while evicted < num_tokens and heap:
            # 2. Pop the leaf the policy likes least.
            _, node = heapq.heappop(heap)
            # 3. Give its slots back to the allocator and cut it out of the tree.
            if self.token_to_kv_pool_allocator is not None:
                self.token_to_kv_pool_allocator.free(node.value)
            evicted += len(node.key)
            self._delete_leaf(node)
            # 4. The parent may have just become an unlocked leaf: it joins the heap.
            parent = node.parent
            if parent is not self.root_node and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (self._priority_fn(parent), parent))
        return evicted

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

    def evictable_size(self) -> int:
        """Cached tokens no live request holds a lock on."""
        return self.evictable_size_

    def protected_size(self) -> int:
        """Cached tokens locked by at least one live request."""
        return self.protected_size_

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
                assert node.lock_ref <= node.parent.lock_ref, f"node {node.id}: lock_ref grows downwards"
            assert node.lock_ref >= 0
            if node.lock_ref:
                protected += len(node.key)
            else:
                evictable += len(node.key)
        assert (evictable, protected) == (self.evictable_size_, self.protected_size_), "size counters drifted"
        leaves = {n for n in self.nodes() if not n.children and n.lock_ref == 0}
        assert self.evictable_leaves_ == leaves, "evictable_leaves_ out of date"

    # -- helpers ------------------------------------------------------------------------------

    def _empty(self) -> torch.Tensor:
        return self._empty_indices  # one shared empty tensor, as SGLang's _empty_match_result

    def _new_node(self, key: RadixKey, value: torch.Tensor | None, parent: TreeNode | None,
                  priority: int = 0) -> TreeNode:
        node = TreeNode(self._next_id, key, value, parent, self._clock, priority)
        self._next_id += 1
        return node

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _prepare_key(self, key: RadixKey | Sequence[int], name: str) -> RadixKey:
        if not isinstance(key, RadixKey):  # a plain token list: packed (and validated) once, here
            key = RadixKey.from_packed(pack_tokens(key, name))
        if self.is_eagle and not key.is_bigram:
            key = key.to_bigram()
        return key

    def _check_in_tree(self, node: TreeNode, name: str) -> None:
        if not isinstance(node, TreeNode):
            raise TypeError(f"{name} must be a TreeNode, got {type(node).__name__}")
        walk = node
        while walk.parent is not None:
            walk = walk.parent
        if walk is not self.root_node:
            raise ValueError(f"{name} (id={node.id}) does not belong to this cache")
        if node.evicted:
            raise ValueError(f"{name} (id={node.id}) has been evicted: its slots are gone")

    def _prepare_value(self, key: RadixKey, value: Any) -> torch.Tensor:
        if value is None:  # simulation fallback: slot i := token id i (the first token of a bigram)
            return _int64_tensor(key.packed[: len(key) * ITEM]).to(self.device)
        if not isinstance(value, torch.Tensor):
            value = _int64_tensor(pack_tokens(value, "value"))
        dtype = value.dtype
        if dtype is not torch.int64 and not is_index_dtype(dtype) or value.dim() != 1:
            raise TypeError(f"value must be a 1-D integer tensor of slot indices, got {value.dtype} "
                            f"with shape {tuple(value.shape)}")
        n_raw, n_value = len(key.packed) >> 3, value.numel()
        n = n_raw - 1 if key.is_bigram and n_raw else n_raw  # len(key), without the method call
        if n_value != n and n_value != n_raw:  # n_raw != n only for bigram keys
            raise ValueError(f"value must hold one slot index per token: len(value)={n_value} "
                             f"but len(key)={n}")
        if dtype is not torch.int64 or value.device != self.device:
            value = value.to(device=self.device, dtype=torch.int64)  # indices live with the KV pool
        return value if n_value == n else value[:n]

    def _insert(self, key: Any, value: Any, priority: int = 0, chunked: bool = False) -> tuple[int, TreeNode]:
        key = self._prepare_key(key, "key")
        value = self._prepare_value(key, value)  # validate everything before touching the tree
        if self.page_size != 1:
            key = key.page_aligned(self.page_size)
            value = value[: len(key)]
        return self._insert_helper(self.root_node, key, value, priority, chunked)

    def _match_prefix_helper(self, node: TreeNode, key: RadixKey) -> tuple[list[torch.Tensor], TreeNode]:
        if self.matcher == "fast":
            return self._match_prefix_fast(node, key)
        # The readable walk (notebook 01): tuples of ints, one compare and one key slice per edge.
        now = self._tick()
        node.last_access_time = now
        values: list[torch.Tensor] = []
        # 1. Follow the child whose edge starts with our next unit (or page), in our namespace.
        while len(key) > 0 and (child := node.children.get(key.child_key(self.page_size))) is not None:
            child.last_access_time = now
            # 2. How far does the edge agree with the query (whole pages only)?
            prefix_len = child.key.match(key, self.page_size)
            if prefix_len < len(child.key):
                # 3. The match ends inside the edge: split it so a node ends exactly there.
                new_node = self._split_node(child.key, child, prefix_len)
                values.append(new_node.value)
                return values, new_node
            # 4. The whole edge matched: collect its slots and go down.
            values.append(child.value)
            node = child
            key = key[prefix_len:]
        return values, node

    def _split_node(self, key: RadixKey, child: TreeNode, split_len: int) -> TreeNode:
        """Split ``child``'s edge after ``split_len`` units; returns the new parent node.

        ``new_node`` takes the first ``split_len`` units and the slot indices that go with them,
        ``child`` keeps the rest. No KV data moves; the two halves of the *index* tensor are cloned,
        as SGLang does since PR #17191: a slice would be a view that keeps the whole original index
        storage alive after the other half is evicted (notebook 02 measures it).
        """
        if not 0 < split_len < len(child.key):
            raise ValueError(f"split_len must be inside the edge (0 < split_len < {len(child.key)}), got {split_len}")
        parent = child.parent
        # 1. The new node covers the shared head of the edge and inherits the child's lock.
        new_node = self._new_node(child.key[:split_len], child.value.narrow_copy(0, 0, split_len), parent, child.priority)
        new_node.lock_ref = child.lock_ref
        new_node.hit_count = child.hit_count
        new_node.last_access_time = child.last_access_time
        # 2. The child keeps the tail, and hangs below the new node under its new first page.
        child.key = child.key[split_len:]
        child.value = child.value.narrow_copy(0, split_len, len(child.key))  # (narrow_copy = slice + clone, one op)
        child.parent = new_node
        new_node.children[child.key.child_key(self.page_size)] = child
        # 3. The parent's entry (same first page as before) now points at the new node.
        parent.children[key.child_key(self.page_size)] = new_node
        return new_node

    def _insert_helper(self, node: TreeNode, key: RadixKey, value: torch.Tensor,
                       priority: int = 0, chunked: bool = False) -> tuple[int, TreeNode]:
        if self.matcher == "fast":
            return self._insert_fast(node, key, value, priority, chunked)
        now = self._tick()
        node.last_access_time = now
        total_prefix_length = 0
        # 1. Walk down while an edge starts with our next unit/page in our namespace.
        while len(key) > 0 and (child := node.children.get(key.child_key(self.page_size))) is not None:
            child.last_access_time = now
            prefix_len = child.key.match(key, self.page_size)
            total_prefix_length += prefix_len
            key, value = key[prefix_len:], value[prefix_len:]
            # 2. Diverged inside the edge: split so the shared part is its own node.
            if prefix_len < len(child.key):
                child = self._split_node(child.key, child, prefix_len)
            if not chunked:  # a chunked prefill meeting its own earlier chunks is not a hit
                child.hit_count += 1
            child.priority = max(child.priority, priority)
            node = child
        # 3. Whatever is left is new: one leaf holding a private copy of its slot indices.
        if len(key):
            leaf = self._new_node(key, value.clone(), node, priority)
            leaf.hit_count = 0 if chunked else 1
            node.children[key.child_key(self.page_size)] = leaf
            self.evictable_size_ += len(key)
            self._update_leaf_status(node)
            self._update_leaf_status(leaf)
            node = leaf
        return total_prefix_length, node

    # -- the fast matcher: the same walks over the query's packed bytes ------------------------
    # ``pos`` is a byte offset into ``key.packed`` (8 bytes a token). An edge matches whole when
    # ``packed.startswith(edge, pos)``: one memcmp, no slicing of the query. In the bigram view an
    # edge of u units holds u+1 raw tokens and the next edge starts one token before its end.

    def _match_prefix_fast(self, node: TreeNode, key: RadixKey) -> tuple[list[torch.Tensor], TreeNode]:
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

    def _insert_fast(self, node: TreeNode, key: RadixKey, value: torch.Tensor,
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
            leaf = self._new_node(key_over(packed[pos:], ns, key.is_bigram),
                                  value.narrow_copy(0, prefix_len, (end - pos) >> 3), node, priority)
            leaf.hit_count = 0 if chunked else 1
            node.children[first if ns is None else (ns, first)] = leaf
            self.evictable_size_ += (end - pos) >> 3
            self.evictable_leaves_.discard(node)  # it has a child now
            self.evictable_leaves_.add(leaf)  # new, unlocked, childless: what _update_leaf_status decides
            node = leaf
        return prefix_len, node

    def _delete_leaf(self, node: TreeNode) -> None:
        del node.parent.children[node.key.child_key(self.page_size)]
        self.evictable_size_ -= len(node.key)
        node.value = None  # marks it evicted
        self.evictable_leaves_.discard(node)
        self._update_leaf_status(node.parent)

    def _update_leaf_status(self, node: TreeNode) -> None:
        """Keep ``evictable_leaves_`` exact: a node is in it iff it is an unlocked, live leaf."""
        if node is self.root_node or node.evicted or node.lock_ref > 0 or node.children:
            self.evictable_leaves_.discard(node)
        else:
            self.evictable_leaves_.add(node)

    # -- the request lifecycle: how a request hands its KV to the cache (notebook 05) -------------
    # ``req`` is a ``radixlab.request.Request`` (SGLang's ``Req`` fields). Its row in
    # ``req_to_token_pool`` holds one slot per token of ``req.fill_ids``; the first
    # ``req.cache_protected_len`` of them are the tree's slots, locked through ``req.last_node``;
    # the rest are the request's own.

    def cache_finished_req(self, req: Any, is_insert: bool = True, kv_len_to_handle: int | None = None) -> None:
        """A finished request hands its KV to the tree and drops its lock (the caller frees the row).

        Afterwards every slot of the row is the tree's or free: tokens the tree already had keep the
        tree's slots and the request's duplicates are freed; new whole pages become tree nodes; the
        unaligned tail (less than a page) is freed; ``req.last_node`` is unlocked.
        """
        allocator, row = self._lifecycle_args(req)
        kv_len = req.seq_len if kv_len_to_handle is None else kv_len_to_handle
        if isinstance(kv_len, bool) or not isinstance(kv_len, Integral) or not req.cache_protected_len <= kv_len <= req.seq_len:
            raise ValueError(f"kv_len_to_handle must be in {req.cache_protected_len} .. {req.seq_len}, got {kv_len!r}")
        kv_indices = row[:kv_len]
        key = self._request_key(req, kv_len)
        key_len = len(key)
        # 1. Insert: the tree takes the pages it lacked; prefix_len says how many it already had.
        if is_insert:
            prefix_len, _ = self._insert(key, kv_indices[:key_len].clone(), req.priority)
        else:
            prefix_len = key_len
        # 2. Tokens past our locked prefix that the tree had anyway (another request inserted them
        #    meanwhile): the tree's copy wins, our duplicate slots go back to the allocator.
        allocator.free(kv_indices[req.cache_protected_len:prefix_len])
        # 3. The unaligned tail (part of a page) is not cached: free it.
        allocator.free(kv_indices[key_len:])
        # 4. Drop our lock: the path becomes evictable once no other request holds it.
        if req.last_node is not None:
            self.dec_lock_ref(req.last_node)
        req.last_node = None
        req.cache_protected_len = 0
        req.prefix_indices = self._empty()
        req.finished = True

    def cache_unfinished_req(self, req: Any, chunked: bool = False) -> None:
        """Mid-request (after a chunk of a chunked prefill): the tree adopts the KV computed so far.

        Inserts ``req.fill_ids``, frees our duplicates, rewrites our row to point at the tree's
        slots, and moves our lock from the old ``last_node`` to the node where ``fill_ids`` ends.
        The unaligned tail stays ours (it is in ``req.prefix_indices``, not in the tree).
        ``chunked`` is SGLang's flag: the insert then leaves ``hit_count`` alone, so a request's own
        earlier chunks do not inflate LFU's counts.
        """
        allocator, row = self._lifecycle_args(req)
        kv_indices = row[: req.seq_len]
        key = self._request_key(req, len(req.fill_ids))
        # 1. Insert what is computed so far (whole pages only).
        new_prefix_len, _ = self._insert(key, kv_indices[: len(key)].clone(), req.priority, chunked)
        # 2. Free our duplicates of tokens the tree already had.
        allocator.free(kv_indices[req.cache_protected_len:new_prefix_len])
        # 3. Match again: the tree's slots and the node where our key ends.
        match = self.match_prefix(key)
        new_indices, new_last_node = match.device_indices, match.last_node
        n_cached = new_indices.shape[0]
        assert n_cached == len(key), f"{n_cached=} != {len(key)=}"
        # 4. Our row now points at the tree's slots for the cached part.
        self.req_to_token_pool.write(req.req_pool_idx, req.cache_protected_len, new_indices[req.cache_protected_len:])
        req.cache_protected_len = n_cached
        # 5. Move the lock (take the new one first, so no node is unlocked in between).
        self.inc_lock_ref(new_last_node)
        if req.last_node is not None:
            self.dec_lock_ref(req.last_node)
        req.last_node = new_last_node
        # 6. The next chunk reuses all of it: the tree's slots, then our unaligned tail.
        req.prefix_indices = torch.cat([new_indices, row[n_cached: req.seq_len]])

    def _request_key(self, req: Any, n: int) -> RadixKey:
        """The page-aligned key of the request's first ``n`` tokens, from its packed ids (no list conversion)."""
        if hasattr(req, "packed_ids"):
            key = RadixKey.from_packed(req.packed_ids(n), req.extra_key, self.is_eagle)
        else:
            key = RadixKey(req.all_ids[:n], req.extra_key, is_bigram=self.is_eagle)
        return key.page_aligned(self.page_size)

    def _lifecycle_args(self, req: Any) -> tuple[Any, torch.Tensor]:
        """Validate a request before ``cache_*_req`` changes anything; returns (allocator, row)."""
        if self.token_to_kv_pool_allocator is None or self.req_to_token_pool is None:
            raise ValueError("cache_*_req needs a RadixCache built with token_to_kv_pool_allocator "
                             "and req_to_token_pool")
        for name in ("req_pool_idx", "fill_ids", "cache_protected_len", "last_node", "extra_key"):
            if not hasattr(req, name):
                raise TypeError(f"req must be a radixlab.request.Request (missing {name!r}), got {type(req).__name__}")
        if getattr(req, "finished", False) or req.req_pool_idx is None:
            raise ValueError(f"request {getattr(req, 'rid', '?')!r} has no live row (finished already, or never admitted)")
        if req.last_node is not None:
            self._check_in_tree(req.last_node, "req.last_node")
            if req.last_node is not self.root_node and req.last_node.lock_ref <= 0:
                raise ValueError(f"req.last_node (id={req.last_node.id}) is not locked")
        return self.token_to_kv_pool_allocator, self.req_to_token_pool.req_to_token[req.req_pool_idx]


def _int64_tensor(packed: bytes) -> torch.Tensor:
    """A CPU int64 tensor holding packed int64 bytes (a private copy)."""
    if not packed:
        return torch.empty(0, dtype=torch.int64)
    return torch.frombuffer(bytearray(packed), dtype=torch.int64)


def describe_node(node: TreeNode, max_tokens: int = 8) -> str:
    """One-line description of a cache node: key (abbreviated), slots, lock_ref."""
    ns = f" ns={node.key.extra_key!r}" if node.key.extra_key is not None else ""
    slots = abbreviate([int(v) for v in node.value.tolist()], max_tokens) if node.value is not None else "evicted"
    return (f"#{node.id} {abbreviate(list(node.key.units), max_tokens)}{ns} "
            f"slots={slots} lock_ref={node.lock_ref} t={node.last_access_time}")


def abbreviate(items: Sequence, max_items: int = 8) -> str:
    """``[1, 2, 3]`` or, for long edges, ``[1, 2, … 37] (37 tok)``."""
    items = list(items)
    if len(items) <= max_items:
        return repr(items)
    head = ", ".join(repr(x) for x in items[: max_items - 1])
    return f"[{head}, … {items[-1]!r}] ({len(items)} tok)"
