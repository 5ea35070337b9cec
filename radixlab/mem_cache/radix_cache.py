"""SGLang's radix cache with the readable walk: TreeNode and RadixCache (notebooks 01-06).

Mirrors ``sglang/srt/mem_cache/radix_cache.py``: each node maps a run of tokens (``key``, a
``RadixKey``) to the KV slots holding their K/V (``value``, int64, one slot per token). Children are
keyed by first token (or first page) and namespace (``extra_key``). The walk here is the one the
notebooks explain (tuples of ints, one key slice per edge); ``FastRadixCache`` (fast_radix_cache.py)
walks packed bytes instead and is what the engine and the benchmarks use. Differences from SGLang,
on purpose: ``last_access_time`` is a logical clock (one tick per match/insert), not
``time.monotonic()``, so eviction order and drawings are reproducible; ties break by node id, which
orders a tick's events as SGLang's clock would (tests/test_sglang_differential.py); node ids count
from 1 per cache; freeing twice, unlocking an unlocked node or passing another cache's node raise.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable, Sequence

import torch

from ..utils import debug
from ..utils.checks import check_int
from .base_prefix_cache import BasePrefixCache, MatchResult
from .common import Request
from .evict_policy import _resolve_policy
from .radix_key import ITEM, RadixKey, pack_tokens
from .radix_views import RadixTreeViews
from .tree_node import TreeNode
from .utils import check_slots, slot_tensor


class RadixCache(RadixTreeViews, BasePrefixCache):
    """A prefix cache over KV slot indices, with SGLang's method names and the readable walk.

    ``token_to_kv_pool_allocator`` (optional) receives the slots that ``evict`` frees;
    ``req_to_token_pool`` is used by ``cache_finished_req``/``cache_unfinished_req``.
    """

    def __init__(self, page_size: int = 1, *, token_to_kv_pool_allocator: Any = None,
                 req_to_token_pool: Any = None, eviction_policy: str | Callable = "lru",
                 is_eagle: bool = False, device: str | torch.device = "cpu") -> None:
        self.page_size = check_int(page_size, "page_size", 1)
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.req_to_token_pool = req_to_token_pool
        self.eviction_policy = eviction_policy
        self._priority_fn = _resolve_policy(eviction_policy)
        self.is_eagle = bool(is_eagle)
        self.device = torch.device(device)
        self._empty_indices = torch.empty(0, dtype=torch.int64, device=self.device)
        self.reset()

    def reset(self) -> None:
        """Drop every node (slots are *not* returned to an allocator: use ``evict`` for that)."""
        self._next_id = 0
        self._clock = 0
        self._owner = object()  # every node of this tree (until the next reset) carries it
        self.root_node = self._new_node(RadixKey.from_packed(b""), torch.empty(0, dtype=torch.int64), None)
        self.root_node.lock_ref = 1  # the root is never evictable
        self.evictable_size_ = 0
        self.protected_size_ = 0
        # unlocked leaves, kept exact on every change (SGLang's evictable_leaves): where evict starts
        self.evictable_leaves_: set[TreeNode] = set()

    def match_prefix(self, key: RadixKey | Sequence[int], req: Request | None = None) -> MatchResult:
        """Longest cached, page-aligned prefix of ``key`` in its namespace (``req`` is not used).

        A match ending inside an edge splits it, so ``last_node`` ends exactly at the match; touched
        nodes get a fresh ``last_access_time``. ``device_indices`` is read-only (a single edge's is
        that node's own tensor; SGLang copies it)."""
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

        Only whole pages are stored; ``value=None`` uses the token ids as stand-in slots (SGLang's
        simulation fallback). The caller keeps the slots of the first ``prefix_len`` units.
        ``chunked=True`` (SGLang's ``InsertParams.chunked``) leaves ``hit_count`` alone. Given slots
        are checked first (``utils.check_slots``): with an allocator, >= 0 and handed out by it; without
        one (a tree that owns no KV), a list is checked for negative slots and a tensor only with the
        debug switch on, as that check would add a fifth to the time of every insert."""
        check = value is not None and (self.token_to_kv_pool_allocator is not None or debug.DEBUG
                                       or not isinstance(value, torch.Tensor))
        prefix_len, _ = self._insert(key, value, priority, chunked, check=check)
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
        """Undo one ``inc_lock_ref(node)``; returns the change in evictable size. A node's ``lock_ref``
        is the locks taken on it plus its children's: unlocking an ancestor of a locked node (where
        nobody took a lock) is refused, as is unlocking an unlocked node."""
        self._check_in_tree(node, "node")
        walk = node
        while walk is not self.root_node:  # check the whole path before changing anything
            if walk.lock_ref <= 0:
                raise ValueError(f"dec_lock_ref on node {walk.id} whose lock_ref is already 0 "
                                 "(unlocking a node that is not locked)")
            walk = walk.parent
        if node is not self.root_node and node.lock_ref <= sum(c.lock_ref for c in node.children.values()):
            raise ValueError(f"dec_lock_ref on node {node.id}: no lock was taken on it (its lock_ref="
                             f"{node.lock_ref} all comes from locked descendants; unlock the node that "
                             "was locked)")
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
        """Free at least ``num_tokens`` cached tokens from unlocked leaves (heap eviction, as SGLang);
        returns the tokens evicted. Stops when enough is freed or nothing is evictable."""
        num_tokens = check_int(num_tokens, "num_tokens", 0)
        # 1. Every unlocked leaf is a candidate, keyed by the eviction policy (lru: oldest first).
        return self._evict_from_heap(self._evictable_heap(), num_tokens)

    def _evictable_heap(self) -> list[tuple[Any, TreeNode]]:
        """``(policy key, leaf)`` for every unlocked leaf, heapified: where ``evict`` starts."""
        heap = [(self._priority_fn(n), n) for n in self.evictable_leaves_]
        heapq.heapify(heap)
        return heap

    def _evict_from_heap(self, heap: list, num_tokens: int) -> int:
        """The loop of ``evict`` (notebook 06's exercise): pop, free, delete, push a new leaf parent."""
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

    def evictable_size(self) -> int:
        """Cached tokens no live request holds a lock on."""
        return self.evictable_size_

    def protected_size(self) -> int:
        """Cached tokens locked by at least one live request."""
        return self.protected_size_

    # -- helpers ------------------------------------------------------------------------------

    def _empty(self) -> torch.Tensor:
        return self._empty_indices  # one shared empty tensor, as SGLang's _empty_match_result

    def _new_node(self, key: RadixKey, value: torch.Tensor | None, parent: TreeNode | None,
                  priority: int = 0) -> TreeNode:
        node = TreeNode(self._next_id, key, value, parent, self._clock, priority)
        node.owner = self._owner
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
        """A node of this tree, not evicted: O(1) by the node's ``owner`` tag; the O(depth) walk to
        the root runs only with the debug switch on (``radixlab.utils.debug``)."""
        if not isinstance(node, TreeNode):
            raise TypeError(f"{name} must be a TreeNode, got {type(node).__name__}")
        if node.owner is not self._owner and node is not self.root_node:
            raise ValueError(f"{name} (id={node.id}) does not belong to this cache")
        if node.evicted:
            raise ValueError(f"{name} (id={node.id}) has been evicted: its slots are gone")
        if debug.DEBUG:
            walk = node
            while walk.parent is not None:
                walk = walk.parent
            if walk is not self.root_node:
                raise ValueError(f"{name} (id={node.id}) does not belong to this cache")

    def _insert(self, key: Any, value: Any, priority: int = 0, chunked: bool = False,
                check: bool = False) -> tuple[int, TreeNode]:
        key = self._prepare_key(key, "key")
        value = slot_tensor(key, value, self.device)  # validate everything before touching the tree
        if self.page_size != 1:
            key = key.page_aligned(self.page_size)
            value = value[: len(key)]
        if check:  # slots from outside (insert()); the request path's come from the pool's rows
            check_slots(value, self.token_to_kv_pool_allocator, "value")
        return self._insert_helper(self.root_node, key, value, priority, chunked)

    def _match_prefix_helper(self, node: TreeNode, key: RadixKey) -> tuple[list[torch.Tensor], TreeNode]:
        """The readable walk (notebook 01): tuples of ints, one compare and one key slice per edge."""
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
        """Split ``child``'s edge after ``split_len`` units; returns the new parent node. No KV moves;
        both halves of the index tensor are cloned (SGLang PR #17191: a view would keep the whole
        storage alive after the other half is evicted; notebook 02 measures it)."""
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
        """The readable insert walk; returns (units already cached, the node where ``key`` ends)."""
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
            node = self._add_leaf(node, key.child_key(self.page_size), key, value.clone(), priority, chunked)
        return total_prefix_length, node

    def _add_leaf(self, parent: TreeNode, child_key: Any, key: RadixKey, value: torch.Tensor,
                  priority: int, chunked: bool) -> TreeNode:
        """Hang a new leaf (``value`` is its own copy) below ``parent``; both walks' inserts end here."""
        leaf = self._new_node(key, value, parent, priority)
        leaf.hit_count = 0 if chunked else 1
        parent.children[child_key] = leaf
        self.evictable_size_ += len(value)
        self.evictable_leaves_.discard(parent)  # it has a child now
        self.evictable_leaves_.add(leaf)  # new, unlocked, childless
        return leaf

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

    # -- the request lifecycle (notebook 05): the row holds a slot per token of ``req.fill_ids``; the
    # first ``req.cache_protected_len`` are the tree's, locked through ``req.last_node``, the rest ours.

    def cache_finished_req(self, req: Any, is_insert: bool = True, kv_len_to_handle: int | None = None) -> None:
        """A finished request hands its KV to the tree and drops its lock (the caller frees the row):
        new whole pages become nodes, duplicates of what the tree had and the unaligned tail are freed."""
        allocator, row = self._lifecycle_args(req)
        kv_len = req.seq_len if kv_len_to_handle is None else kv_len_to_handle
        check_int(kv_len, "kv_len_to_handle", req.cache_protected_len, req.seq_len)
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
        """After a prefill chunk the tree adopts ``req.fill_ids``' KV: duplicates are freed, the row
        points at the tree's slots, the lock moves to where ``fill_ids`` ends; the unaligned tail
        stays ours. ``chunked`` (SGLang's flag) leaves ``hit_count`` alone."""
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
        return RadixKey.from_packed(req.packed_ids(n), req.extra_key, self.is_eagle).page_aligned(self.page_size)

    def _lifecycle_args(self, req: Any) -> tuple[Any, torch.Tensor]:
        """Validate a request before ``cache_*_req`` changes anything; returns (allocator, row)."""
        if self.token_to_kv_pool_allocator is None or self.req_to_token_pool is None:
            raise ValueError("cache_*_req needs a RadixCache built with token_to_kv_pool_allocator "
                             "and req_to_token_pool")
        if not isinstance(req, Request):
            raise TypeError(f"req must be a radixlab.mem_cache.Request, got {type(req).__name__}")
        if req.finished or req.req_pool_idx is None:
            raise ValueError(f"request {req.rid!r} has no live row (finished already, or never admitted)")
        if req.last_node is not None:
            self._check_in_tree(req.last_node, "req.last_node")
            if req.last_node is not self.root_node and req.last_node.lock_ref <= 0:
                raise ValueError(f"req.last_node (id={req.last_node.id}) is not locked")
        return self.token_to_kv_pool_allocator, self.req_to_token_pool.req_to_token[req.req_pool_idx]
