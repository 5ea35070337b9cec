"""``HashBlockCache``: vLLM's prefix cache inside the engine (``Engine(prefix_cache="hash")``).

Run the way vLLM runs it (``v1/core/kv_cache_manager.py``, ``block_pool.py``) so that notebook 09
and ``bench serve`` compare radix and hash fairly: only full blocks are cached, a block's hash
chains its parent's (``hash_cache.block_hash_input``), the request keeps its block hashes
(``Request.block_hashes``, vLLM's ``request.block_hashes``), blocks are cached when allocated
(``caches_on_alloc``) and a block whose ``lock_ref`` (vLLM's ``ref_cnt``) drops to 0 joins a free
queue that ``evict`` takes from the head. Differences from vLLM: a hit is trusted only after its
tokens are compared (vLLM trusts the hash), an orphan (a block whose parent was evicted) only after
its whole evicted prefix is compared too; slots come from radixlab's allocator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Hashable

import torch

from .base_prefix_cache import BasePrefixCache, MatchResult
from .hash_cache import _check_block_size, _xxh64, block_hash_input
from ..utils.checks import check_int
from .radix_key import RadixKey, _as_token_tuple

if TYPE_CHECKING:
    from .common import Request


class HashBlock:
    """One cached block: chain hash, tokens, slots, and vLLM's ``ref_cnt`` (here ``lock_ref``).

    It has the attributes the engine reads from a tree node (``parent``, ``key``, ``lock_ref``), so
    the scheduler locks a chain of blocks exactly as it locks a path of the radix tree.
    """

    __slots__ = ("hash", "key", "extra_key", "parent", "value", "lock_ref", "held", "id", "owner")

    def __init__(self, h: int | None, tokens: tuple, extra_key: Hashable | None, parent: HashBlock | None,
                 value: torch.Tensor, block_id: int) -> None:
        self.hash, self.key, self.extra_key, self.parent, self.value = h, tokens, extra_key, parent, value
        self.lock_ref = 0
        self.held = 0  # locks taken on this block itself (lock_ref also counts those of its descendants)
        self.id = block_id
        self.owner: object = None  # the cache it belongs to (HashBlockCache._owner)

    @property
    def evicted(self) -> bool:
        return self.value is None

    def __repr__(self) -> str:
        return f"HashBlock(id={self.id}, tokens={list(self.key[:4])}..., lock_ref={self.lock_ref})"


class HashBlockCache(BasePrefixCache):
    """vLLM's prefix cache: a flat ``chain hash -> block`` table over the KV pool (see the module
    docstring). Blocks enter the table at allocation (``cache_at_allocation``, called by the
    scheduler at admission), so a request admitted later in the same batch hits them: the forward
    writes their KV layer by layer before any request's attention reads it. It locks a chain of
    blocks as the radix cache locks a path; ``root_node`` is a sentinel block.
    """

    caches_on_alloc = True

    def __init__(self, block_size: int = 16, *, token_to_kv_pool_allocator: Any = None, req_to_token_pool: Any = None,
                 device: str | torch.device = "cpu", hash_fn: Callable[[bytes], int] | None = None) -> None:
        _check_block_size(block_size)
        page = 1 if token_to_kv_pool_allocator is None else token_to_kv_pool_allocator.page_size
        if block_size % page:
            raise ValueError(f"block_size must be a multiple of the KV pool's page_size={page}, got {block_size}")
        self.block_size = block_size
        self.page_size = block_size  # what the engine aligns matches to
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        self.req_to_token_pool = req_to_token_pool
        self.device = torch.device(device)
        self.hash_fn = hash_fn or _xxh64
        self.reset()

    def reset(self) -> None:
        """Forget every block (slots are not returned: the engine clears its allocator itself)."""
        self.table: dict[int, HashBlock] = {}
        self.free_queue: dict[HashBlock, None] = {}  # blocks with lock_ref 0, oldest first (an ordered set)
        self._owner = object()
        self.root_node = HashBlock(None, (), None, None, torch.empty(0, dtype=torch.int64), 0)
        self.root_node.owner = self._owner
        self.root_node.lock_ref = 1
        self._next_id = 1
        self.hash_computations = 0
        self.dict_probes = 0

    # -- hashing -----------------------------------------------------------------------------

    def block_hashes(self, key: RadixKey, req: Request | None = None) -> list[int]:
        """Chain hashes of the full blocks of ``key``, reusing (and extending) ``req.block_hashes``
        (the hashes of ``req.all_ids``: ``key`` must be a prefix of them)."""
        hashes = req.block_hashes if req is not None else []
        tokens, bs = key.token_ids, self.block_size
        n = len(tokens) // bs
        for i in range(len(hashes), n):
            parent = hashes[i - 1] if i else None
            hashes.append(self.hash_fn(block_hash_input(parent, tokens[i * bs:(i + 1) * bs], key.extra_key)))
            self.hash_computations += 1
        return hashes[:n]

    def _key(self, key: Any) -> RadixKey:
        if not isinstance(key, RadixKey):
            key = RadixKey(_as_token_tuple(key, "key"))
        if key.is_bigram:
            raise ValueError("the hash cache works on tokens, not on a bigram view")
        return key

    def _walk(self, key: RadixKey, req: Request | None) -> list[HashBlock]:
        """The cached blocks of ``key``'s longest cached prefix (forward walk, stops at the first miss)."""
        blocks: list[HashBlock] = []
        parent = self.root_node
        for i, h in enumerate(self.block_hashes(key, req)):
            self.dict_probes += 1
            block = self.table.get(h)
            if not self._same(block, parent, key, i):
                break
            blocks.append(block)
            parent = block
        return blocks

    # -- the tree-cache interface -----------------------------------------------------------------

    def match_prefix(self, key: Any, req: Request | None = None) -> MatchResult:
        """Longest cached prefix in whole blocks: ``MatchResult(slots, last block)``. With ``req``, the
        request's kept block hashes are reused and extended (each block hashed once in its life)."""
        blocks = self._walk(self._key(key), req)
        values = torch.cat([b.value for b in blocks]) if blocks else torch.empty(0, dtype=torch.int64, device=self.device)
        return MatchResult(values, blocks[-1] if blocks else self.root_node)

    def _check_block(self, node: Any, name: str = "node") -> None:
        """A live block of this cache (O(1)): a block of another cache would corrupt both."""
        if not isinstance(node, HashBlock):
            raise TypeError(f"{name} must be a HashBlock, got {type(node).__name__}")
        if node.owner is not self._owner:
            raise ValueError(f"{name} (block {node.id}) does not belong to this cache")
        if node.evicted:
            raise ValueError(f"{name} (block {node.id}) has been evicted: its slots are gone")

    def inc_lock_ref(self, node: HashBlock) -> int:
        self._check_block(node)
        node.held += 1
        delta = 0
        while node is not self.root_node:
            if node.lock_ref == 0:
                self.free_queue.pop(node, None)
                delta -= len(node.key)
            node.lock_ref += 1
            node = node.parent
        return delta

    def dec_lock_ref(self, node: HashBlock) -> int:
        self._check_block(node)
        walk = node
        while walk is not self.root_node:
            if walk.lock_ref <= 0:
                raise ValueError(f"dec_lock_ref on block {walk.id} whose lock_ref is already 0")
            walk = walk.parent
        if node is not self.root_node and node.held <= 0:
            raise ValueError(f"dec_lock_ref on block {node.id}: no lock was taken on it (its lock_ref="
                             f"{node.lock_ref} comes from locked blocks after it; unlock the block that was locked)")
        node.held -= 1
        delta = 0
        while node is not self.root_node:  # last block first: the tail joins the free queue first
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.free_queue[node] = None
                delta += len(node.key)
            node = node.parent
        return delta

    def evict(self, num_tokens: int) -> int:
        """Free blocks from the head of the free queue until ``num_tokens`` slots are free."""
        num_tokens = check_int(num_tokens, "num_tokens", 0)
        evicted = 0
        while evicted < num_tokens and self.free_queue:
            block = next(iter(self.free_queue))
            del self.free_queue[block]
            del self.table[block.hash]
            if self.token_to_kv_pool_allocator is not None:
                self.token_to_kv_pool_allocator.free(block.value)
            block.value = None
            evicted += len(block.key)
        return evicted

    def evictable_size(self) -> int:
        return len(self.free_queue) * self.block_size

    def protected_size(self) -> int:
        return (len(self.table) - len(self.free_queue)) * self.block_size

    def total_size(self) -> int:
        return len(self.table) * self.block_size

    def _same(self, block: HashBlock | None, parent: HashBlock, key: RadixKey, i: int) -> bool:
        """The collision guard: is ``block`` (found under block ``i``'s hash) really block ``i`` of
        ``key``, below ``parent``? Its tokens must agree. A block whose parent was evicted (an orphan,
        still in the table as in vLLM) is re-linked under ``parent`` only if its evicted ancestors'
        tokens agree with ``key``'s earlier blocks too: a 64-bit hash alone proves nothing."""
        bs, toks = self.block_size, key.token_ids
        if block is None or block.key != toks[i * bs:(i + 1) * bs] or block.extra_key != key.extra_key:
            return False
        if block.parent is parent:
            return True
        if not block.parent.evicted:
            return False
        ancestor, j = block.parent, i - 1  # walk the orphan's old chain: O(i), on a re-link only
        while ancestor is not None and ancestor is not self.root_node:
            if j < 0 or ancestor.key != toks[j * bs:(j + 1) * bs] or ancestor.extra_key != key.extra_key:
                return False
            ancestor, j = ancestor.parent, j - 1
        if ancestor is None or j != -1:
            return False
        block.parent = parent  # an orphan is never locked: its parent's eviction proves it
        return True

    def _insert(self, key: RadixKey, slots: torch.Tensor, stop_past: int | None = None,
                req: Request | None = None) -> list[tuple[HashBlock, bool]]:
        """Cache every full block of ``key`` (slots from ``slots``); returns the chain now cached as
        ``(block, new)`` pairs (``new``: it took our slots). Stops at a hash collision, and, with
        ``stop_past``, at the first block already cached from token ``stop_past`` on."""
        bs, parent, chain = self.block_size, self.root_node, []
        for i, h in enumerate(self.block_hashes(key, req)):
            tokens = key.token_ids[i * bs:(i + 1) * bs]
            block = self.table.get(h)
            new = block is None
            if not new and stop_past is not None and i * bs >= stop_past:
                break
            if new:
                block = HashBlock(h, tokens, key.extra_key, parent, slots[i * bs:(i + 1) * bs].clone(), self._next_id)
                block.owner = self._owner
                self._next_id += 1
                self.table[h] = block
                self.free_queue[block] = None  # unlocked until someone locks it
            elif not self._same(block, parent, key, i):
                break  # a collision: keep nothing past it
            chain.append((block, new))
            parent = block
        return chain

    @staticmethod
    def _request_key(req: Request, n: int) -> RadixKey:
        """The key of the request's first ``n`` tokens, from its packed ids."""
        return RadixKey.from_packed(req.packed_ids(n), req.extra_key)

    def _free_duplicates(self, chain: list[tuple[HashBlock, bool]], kv: torch.Tensor, protected: int) -> None:
        """Our slots of blocks the table already had (past our locked prefix) go back to the allocator."""
        bs = self.block_size
        for i, (block, new) in enumerate(chain):
            if not new and i * bs >= protected:
                self.token_to_kv_pool_allocator.free(kv[i * bs:(i + 1) * bs])

    def cache_finished_req(self, req: Any, is_insert: bool = True, kv_len_to_handle: int | None = None) -> None:
        """A finished request: its full blocks join the table, duplicates and the tail are freed, locks drop."""
        allocator, row = self.token_to_kv_pool_allocator, self.req_to_token_pool.req_to_token[req.req_pool_idx]
        kv_len = req.seq_len if kv_len_to_handle is None else kv_len_to_handle
        kv = row[:kv_len]
        key = self._request_key(req, kv_len)
        if is_insert:
            chain = self._insert(key, kv, req=req)
            cached = len(chain) * self.block_size
            self._free_duplicates(chain, kv, req.cache_protected_len)
        else:
            cached = req.cache_protected_len
        allocator.free(kv[max(cached, req.cache_protected_len):])
        if req.last_node is not None and req.last_node is not self.root_node:
            self.dec_lock_ref(req.last_node)
        req.last_node = None
        req.cache_protected_len = 0
        req.prefix_indices = torch.empty(0, dtype=torch.int64, device=self.device)
        req.finished = True

    def cache_unfinished_req(self, req: Any, chunked: bool = False) -> None:
        """After a prefill (chunk): the table adopts the full blocks so far; the request re-points its row."""
        row = self.req_to_token_pool.req_to_token[req.req_pool_idx]
        kv = row[:req.seq_len]
        key = self._request_key(req, len(req.fill_ids))
        pairs = self._insert(key, kv, req=req)
        self._free_duplicates(pairs, kv, req.cache_protected_len)
        chain = [b for b, _ in pairs]
        new_len = len(chain) * self.block_size
        if chain:
            values = torch.cat([b.value for b in chain])
            self.req_to_token_pool.write(req.req_pool_idx, req.cache_protected_len, values[req.cache_protected_len:])
        else:
            values = torch.empty(0, dtype=torch.int64, device=self.device)
        self._relock(req, chain[-1] if chain else self.root_node)
        req.cache_protected_len = new_len
        req.prefix_indices = torch.cat([values, row[new_len:req.seq_len]])

    def _relock(self, req: Any, node: Any) -> None:
        """The request's lock moves to ``node`` (the root takes none), from the node it held before."""
        if node is not self.root_node:
            self.inc_lock_ref(node)
        if req.last_node is not None and req.last_node is not self.root_node:
            self.dec_lock_ref(req.last_node)
        req.last_node = node

    def cache_at_allocation(self, req: Any) -> None:
        """vLLM's ``allocate_slots``: the full blocks a request is about to compute join the table now,
        with the slots just allocated for them, locked by the request (the scheduler calls this at
        admission: ``Scheduler._alloc_at_admission``). Their KV is written by the coming forward. A
        block another request already cached past our locked prefix (an identical block computed in
        this same batch) ends the run: we compute our own copy anyway, and ``cache_unfinished_req``
        frees it after the forward, when nobody writes it any more."""
        row = self.req_to_token_pool.req_to_token[req.req_pool_idx]
        chain = [b for b, _ in self._insert(self._request_key(req, len(req.fill_ids)), row[:req.seq_len], req.cache_protected_len, req)]
        new_len = len(chain) * self.block_size
        if new_len <= req.cache_protected_len:
            return
        self._relock(req, chain[-1])
        req.cache_protected_len = new_len  # the row already holds these blocks' slots: they are ours
        req.prefix_indices = row[:req.seq_len].clone()

    def check_invariants(self) -> None:
        """Counts agree: a block is in the free queue iff nobody locks it; locks never grow downwards."""
        for h, b in self.table.items():
            assert b.hash == h and not b.evicted and len(b.value) == self.block_size
            assert (b.lock_ref == 0) == (b in self.free_queue), f"block {b.id}: free queue out of date"
            assert b.parent is self.root_node or b.lock_ref <= b.parent.lock_ref or b.parent.evicted
        assert all(b.hash in self.table for b in self.free_queue)
