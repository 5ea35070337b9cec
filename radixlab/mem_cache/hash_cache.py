"""The chained-hash block prefix cache: the seed's "step13" baseline that the radix tree replaced.

A prompt is cut into blocks of ``block_size`` tokens (16 by default). Each full block gets a hash
that folds in the hash of the block before it, so one hash names a whole prefix::

    h0 = xxh64(b"\\x00" * 8 || tokens[0:16])
    h1 = xxh64(str(h0)      || tokens[16:32])
    h2 = xxh64(str(h1)      || tokens[32:48])      table[h2] = KV of tokens[32:48]

The table is a flat dict ``chain hash -> CachedBlock``. A namespace (``extra_key``: a LoRA id, a
cache salt...) is folded into the first block's hash, as vLLM does with ``cache_salt``, so the
whole chain differs between namespaces. A hit is trusted only after a collision guard compares the
block's tokens (and its parent block) with the query.

Two lookups, both counting their work (``hash_computations``, ``dict_probes``) so notebook
03_hash_vs_radix can *show* the cost:

* ``match_probe_down``: the seed's description. Hash every block of the query, then probe from the
  longest possible prefix down until a probe hits.
* ``match_forward``: hash block 0, probe, hash block 1, probe... stop at the first miss.
* ``match_kept_hashes``: what vLLM actually runs. A request keeps its block hashes
  (``RequestBlockHashes``, vLLM's ``request.block_hashes``), computed once as its blocks fill; a
  lookup only probes the dict with them, front to back, and hashes nothing.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

import torch
import xxhash

from .radix_cache import RadixKey, _as_token_tuple
from .radix_key import is_index_dtype

ROOT_SEED = b"\x00" * 8
"""What block 0 is chained to: eight zero bytes, as in the seed."""


def _xxh64(data: bytes) -> int:
    return xxhash.xxh64_intdigest(data)


def block_hash_input(parent_hash: int | None, block: Sequence[int], extra_key: Hashable | None = None) -> bytes:
    """The bytes one block's hash is computed over: ``parent || tokens`` (|| namespace, block 0 only)."""
    head = ROOT_SEED if parent_hash is None else str(parent_hash).encode()
    data = head + array("q", block).tobytes()
    if parent_hash is None and extra_key is not None:
        data += b"\xffextra_key=" + repr(extra_key).encode()
    return data


def chain_hashes(tokens: Sequence[int], block_size: int = 16, extra_key: Hashable | None = None,
                 hash_fn: Callable[[bytes], int] = _xxh64) -> list[int]:
    """The chain hash of every *full* block of ``tokens`` (a trailing partial block has none)."""
    _check_block_size(block_size)
    hashes: list[int] = []
    parent = None
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash_fn(block_hash_input(parent, tokens[start:start + block_size], extra_key))
        hashes.append(parent)
    return hashes


def _check_block_size(block_size: Any) -> None:
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        raise TypeError(f"block_size must be an int, got {type(block_size).__name__}")
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")


class RequestBlockHashes:
    """A request's block hashes, kept on the request and extended as its blocks fill (vLLM's
    ``request.block_hashes``). Each full block is hashed exactly once in the request's life; every
    lookup reuses the list (``HashPrefixCache.match_kept_hashes``). Notebook 03_hash_vs_radix.
    """

    def __init__(self, tokens: Sequence[int] = (), block_size: int = 16, extra_key: Hashable | None = None,
                 hash_fn: Callable[[bytes], int] = _xxh64) -> None:
        _check_block_size(block_size)
        if extra_key is not None and not isinstance(extra_key, Hashable):
            raise TypeError(f"extra_key must be hashable, got {type(extra_key).__name__}")
        self.block_size, self.extra_key, self.hash_fn = block_size, extra_key, hash_fn
        self.tokens: list[int] = []
        self.hashes: list[int] = []
        self.hash_computations = 0
        self.append(tokens)

    def append(self, new_tokens: Sequence[int]) -> int:
        """Add tokens (the prompt, then each output token); hash only the blocks they complete."""
        toks = _as_token_tuple(new_tokens, "new_tokens")
        self.tokens.extend(toks)
        bs, added = self.block_size, 0
        parent = self.hashes[-1] if self.hashes else None
        for start in range(len(self.hashes) * bs, len(self.tokens) - bs + 1, bs):
            parent = self.hash_fn(block_hash_input(parent, self.tokens[start:start + bs], self.extra_key))
            self.hashes.append(parent)
            added += 1
        self.hash_computations += added
        return added

    def __len__(self) -> int:
        return len(self.hashes)


@dataclass(eq=False)
class CachedBlock:
    """One table entry: a full block's tokens, its KV slot indices and the block it extends."""

    hash: int
    tokens: tuple[int, ...]
    extra_key: Hashable | None
    parent: CachedBlock | None
    value: torch.Tensor
    ref: int = 1  # how many inserts passed through this block (the seed's manual ref_count)

    def __repr__(self) -> str:
        return f"CachedBlock(hash={self.hash:#018x}, tokens={list(self.tokens[:4])}..., ref={self.ref})"


@dataclass
class HashMatch:
    """Result of a lookup: the cached blocks of the longest hit and what finding them cost."""

    blocks: list[CachedBlock]
    block_size: int
    hash_computations: int
    dict_probes: int
    collisions: int = 0

    @property
    def hit_tokens(self) -> int:
        return len(self.blocks) * self.block_size

    @property
    def device_indices(self) -> torch.Tensor:
        """KV slot indices of the hit, one per token (what the radix cache's match returns)."""
        if not self.blocks:
            return torch.empty(0, dtype=torch.int64)
        return torch.cat([b.value for b in self.blocks])

    def __len__(self) -> int:
        return self.hit_tokens


@dataclass
class HashCacheStats:
    """Running totals over every lookup of a cache."""

    lookups: int = 0
    hash_computations: int = 0
    dict_probes: int = 0
    collisions: int = 0


class HashPrefixCache:
    """A flat ``chain hash -> block`` prefix cache with block granularity (notebook 03)."""

    def __init__(self, block_size: int = 16, hash_fn: Callable[[bytes], int] | None = None) -> None:
        _check_block_size(block_size)
        self.block_size = block_size
        self.hash_fn = hash_fn or _xxh64  # tests pass a weak hash to force collisions
        self.table: dict[int, CachedBlock] = {}
        self.stats = HashCacheStats()

    # -- input -------------------------------------------------------------------------------

    def _prepare(self, tokens: Any, extra_key: Hashable | None) -> tuple[tuple[int, ...], Hashable | None]:
        if isinstance(tokens, RadixKey):
            if tokens.is_bigram:
                raise ValueError("the hash cache works on tokens, not on a bigram view")
            if extra_key is not None and extra_key != tokens.extra_key:
                raise ValueError(f"cannot mix namespaces in one key: tokens carry extra_key "
                                 f"{tokens.extra_key!r}, got extra_key={extra_key!r}")
            return tokens.token_ids, tokens.extra_key
        if extra_key is not None and not isinstance(extra_key, Hashable):
            raise TypeError(f"extra_key must be hashable, got {type(extra_key).__name__}")
        return _as_token_tuple(tokens, "tokens"), extra_key

    def _hash(self, parent: int | None, block: Sequence[int], extra_key: Hashable | None) -> int:
        return self.hash_fn(block_hash_input(parent, block, extra_key))

    @staticmethod
    def _guard(entry: CachedBlock | None, block: tuple, extra_key: Hashable | None,
               parent: CachedBlock | None) -> bool:
        """Collision guard: a hash hit counts only if the block really is this one."""
        return (entry is not None and entry.tokens == block and entry.parent is parent
                and entry.extra_key == extra_key)

    # -- insert ------------------------------------------------------------------------------

    def insert(self, tokens: Any, value: Any = None, extra_key: Hashable | None = None) -> int:
        """Store every full block of ``tokens``; returns how many leading tokens were already cached.

        A trailing partial block is not stored (no hash names it). ``value`` gives one KV slot per
        token; None uses the token ids as stand-in slots, like ``RadixCache``. If a block's hash is
        taken by *different* tokens (a collision) the rest of the prompt is not stored.
        """
        toks, extra_key = self._prepare(tokens, extra_key)
        if value is None:
            slots = torch.tensor(toks, dtype=torch.int64)
        else:
            slots = value if isinstance(value, torch.Tensor) else torch.tensor(_as_token_tuple(value, "value"))
            if slots.dim() != 1 or not is_index_dtype(slots.dtype) or len(slots) != len(toks):
                raise ValueError(f"value must hold one slot index per token: len(value)={len(slots)}, "
                                 f"len(tokens)={len(toks)}")
            slots = slots.to(torch.int64)
        bs, parent_hash, parent, already = self.block_size, None, None, 0
        for start in range(0, len(toks) - bs + 1, bs):
            block = toks[start:start + bs]
            h = self._hash(parent_hash, block, extra_key)
            entry = self.table.get(h)
            if entry is None:
                entry = CachedBlock(h, block, extra_key, parent, slots[start:start + bs].clone(), ref=0)
                self.table[h] = entry
            elif not self._guard(entry, block, extra_key, parent):  # (a block made just now is never
                self.stats.collisions += 1                          # the parent of an existing entry)
                break
            else:
                already += bs
            entry.ref += 1
            parent_hash, parent = h, entry
        return already

    # -- lookups -----------------------------------------------------------------------------

    def match_probe_down(self, tokens: Any, extra_key: Hashable | None = None) -> HashMatch:
        """The seed's lookup: hash all blocks, then probe from the longest prefix down."""
        toks, extra_key = self._prepare(tokens, extra_key)
        bs = self.block_size
        # 1. Hash every full block of the query (the chain: each needs the previous one).
        hashes = chain_hashes(toks, bs, extra_key, self.hash_fn)
        probes = collisions = 0
        # 2. Probe the longest prefix first, then one block shorter, and so on.
        for k in range(len(hashes) - 1, -1, -1):
            probes += 1
            entry = self.table.get(hashes[k])
            if entry is None:
                continue
            # 3. A hit: walk its parent pointers and compare tokens (the collision guard).
            blocks = self._verify_chain(entry, toks, k, extra_key)
            if blocks is not None:
                return self._done(HashMatch(blocks, bs, len(hashes), probes, collisions))
            collisions += 1
        return self._done(HashMatch([], bs, len(hashes), probes, collisions))

    def match_forward(self, tokens: Any, extra_key: Hashable | None = None) -> HashMatch:
        """The forward walk: hash block 0, probe; hash block 1, probe; ... stop at the first miss."""
        toks, extra_key = self._prepare(tokens, extra_key)
        bs = self.block_size
        blocks: list[CachedBlock] = []
        parent_hash, parent = None, None
        hashes = probes = collisions = 0
        for start in range(0, len(toks) - bs + 1, bs):
            block = toks[start:start + bs]
            parent_hash = self._hash(parent_hash, block, extra_key)
            hashes += 1
            probes += 1
            entry = self.table.get(parent_hash)
            if not self._guard(entry, block, extra_key, parent):
                collisions += entry is not None
                break
            blocks.append(entry)
            parent = entry
        return self._done(HashMatch(blocks, bs, hashes, probes, collisions))

    def match_kept_hashes(self, block_hashes: Sequence[int], tokens: Any = None) -> HashMatch:
        """vLLM's lookup: probe the dict with the hashes the request already keeps, stop at the first miss.

        Nothing is hashed here: the hashes were computed when the request's blocks filled
        (``RequestBlockHashes``). Like vLLM, a hit is trusted by its hash (vLLM uses SHA-256 by
        default and compares no tokens); we also check the parent pointer, which costs nothing.
        Pass ``tokens`` to compare each block's tokens as well (the collision guard).
        """
        if isinstance(block_hashes, (str, bytes)) or not isinstance(block_hashes, Sequence):
            raise TypeError(f"block_hashes must be a sequence of ints, got {type(block_hashes).__name__}")
        toks = None if tokens is None else self._prepare(tokens, None)[0]
        bs, table = self.block_size, self.table
        blocks: list[CachedBlock] = []
        parent = None
        probes = collisions = 0
        for i, h in enumerate(block_hashes):
            probes += 1
            entry = table.get(h)
            if entry is None:
                break
            if entry.parent is not parent or (toks is not None and entry.tokens != toks[i * bs:(i + 1) * bs]):
                collisions += 1
                break
            blocks.append(entry)
            parent = entry
        return self._done(HashMatch(blocks, bs, 0, probes, collisions))

    def match_prefix(self, tokens: Any, extra_key: Hashable | None = None, strategy: str = "forward") -> HashMatch:
        """Longest cached prefix (in whole blocks); ``strategy`` is "forward" or "probe_down"."""
        if strategy == "forward":
            return self.match_forward(tokens, extra_key)
        if strategy == "probe_down":
            return self.match_probe_down(tokens, extra_key)
        raise ValueError(f"strategy must be 'forward' or 'probe_down', got {strategy!r}")

    def _verify_chain(self, entry: CachedBlock, toks: tuple, k: int,
                      extra_key: Hashable | None) -> list[CachedBlock] | None:
        bs, chain, node = self.block_size, [], entry
        for i in range(k, -1, -1):
            if node is None or node.tokens != toks[i * bs:(i + 1) * bs] or node.extra_key != extra_key:
                return None
            chain.append(node)
            node = node.parent
        return chain[::-1] if node is None else None

    def _done(self, match: HashMatch) -> HashMatch:
        s = self.stats
        s.lookups += 1
        s.hash_computations += match.hash_computations
        s.dict_probes += match.dict_probes
        s.collisions += match.collisions
        return match

    # -- views -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.table)

    def total_tokens(self) -> int:
        return len(self.table) * self.block_size

    def format(self, max_tokens: int = 6) -> str:
        """The flat table as text: one row per block, in insertion order (nbval compares this)."""
        from .radix_cache import abbreviate

        ids = {id(b): i for i, b in enumerate(self.table.values())}
        lines = [f"hash table  ({len(self.table)} blocks of {self.block_size} tokens)"]
        for i, b in enumerate(self.table.values()):
            parent = "-" if b.parent is None else f"#{ids[id(b.parent)]}"
            ns = f" ns={b.extra_key!r}" if b.extra_key is not None else ""
            lines.append(f"#{i:<3} h={b.hash & 0xFFFFFFFF:08x}…  parent={parent:<4} "
                         f"tokens={abbreviate(b.tokens, max_tokens)}{ns} ref={b.ref}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# HashBlockCache: the hash cache *inside the engine* (``Engine(..., prefix_cache="hash")``), run the
# way vLLM runs it, so notebook 09 and ``bench serve`` compare radix vs hash fairly.
# ---------------------------------------------------------------------------------------------


class HashedKey(RadixKey):
    """A request's key that also carries the request's list of block hashes (vLLM: ``Request.block_hashes``).

    ``Req.radix_key`` hands one out; ``HashBlockCache`` reads the hashes already computed from it and
    appends the new ones, so a block of a request is hashed once in its life, not at every match.
    """

    __slots__ = ("block_hashes",)


class HashedBytes(bytes):
    """Packed token ids that carry the request's block-hash list too (``Req.packed_ids``): the
    request path builds keys with ``RadixKey.from_packed``, and the hashes ride along."""

    block_hashes: list


class HashBlock:
    """One cached block: chain hash, tokens, slots, and vLLM's ``ref_cnt`` (here ``lock_ref``).

    It has the attributes the engine reads from a tree node (``parent``, ``key``, ``lock_ref``), so
    the scheduler locks a chain of blocks exactly as it locks a path of the radix tree.
    """

    __slots__ = ("hash", "key", "extra_key", "parent", "value", "lock_ref", "id")

    def __init__(self, h: int | None, tokens: tuple, extra_key: Hashable | None, parent: HashBlock | None,
                 value: torch.Tensor, block_id: int) -> None:
        self.hash, self.key, self.extra_key, self.parent, self.value = h, tokens, extra_key, parent, value
        self.lock_ref = 0
        self.id = block_id

    @property
    def evicted(self) -> bool:
        return self.value is None

    def __repr__(self) -> str:
        return f"HashBlock(id={self.id}, tokens={list(self.key[:4])}..., lock_ref={self.lock_ref})"


class HashBlockCache:
    """vLLM's prefix cache in the engine: a flat ``chain hash -> block`` table over the KV pool.

    How vLLM (``v1/core/kv_cache_manager.py``, ``block_pool.py``) runs it, and what is kept here:

    * Only full blocks of ``block_size`` tokens (16) are cached; a block's hash chains its parent's
      hash (``block_hash_input``), the namespace is folded into block 0 (vLLM's ``cache_salt``).
    * The request keeps its block hashes (``Req.block_hashes``, filled through ``HashedKey``): a match
      hashes only blocks it has not hashed before. ``hash_computations`` counts hashes computed.
    * A match walks forward (hash block 0, probe, block 1, probe...) and stops at the first miss.
    * Blocks are cached when they are allocated, as vLLM's ``allocate_slots`` caches the full blocks
      it hands out (``caches_on_alloc``: the scheduler allocates a request's slots at admission and
      calls ``cache_at_allocation`` at once). A request admitted later in the *same* batch hits
      them; the forward writes their KV layer by layer before any request's attention reads it.
      (A radix cache, like SGLang's, adopts a prefill's KV only after the prefill ran.)
    * Every block a running request uses has ``lock_ref`` (vLLM's ``ref_cnt``) > 0. A block whose
      count drops to 0 joins the free queue; ``evict`` takes the queue's head first. A request's
      blocks join it last block first (vLLM frees in reverse), so a prompt's tail goes before its head.

    It speaks the tree-cache interface the scheduler uses (``match_prefix``, ``inc_lock_ref``,
    ``dec_lock_ref``, ``evict``, ``evictable_size``, ``cache_finished_req``, ``cache_unfinished_req``),
    with a sentinel ``root_node``. Differences from vLLM: no hash collisions are trusted (tokens are
    compared, as ``HashPrefixCache``); slots are handed out by radixlab's allocator, so a block is a
    run of ``block_size`` slots, not one physical block id.
    """

    caches_on_alloc = True  # see the class docstring; the scheduler reads it

    def __init__(self, block_size: int = 16, *, token_to_kv_pool_allocator: Any = None, req_to_token_pool: Any = None,
                 device: str | torch.device = "cpu", hash_fn: Callable[[bytes], int] | None = None) -> None:
        _check_block_size(block_size)
        page = getattr(token_to_kv_pool_allocator, "page_size", 1)
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
        self.root_node = HashBlock(None, (), None, None, torch.empty(0, dtype=torch.int64), 0)
        self.root_node.lock_ref = 1
        self._next_id = 1
        self.hash_computations = 0
        self.dict_probes = 0

    # -- hashing -----------------------------------------------------------------------------

    def block_hashes(self, key: RadixKey) -> list[int]:
        """Chain hashes of the full blocks of ``key``, reusing (and extending) those the request keeps."""
        kept = getattr(key, "block_hashes", None)
        if kept is None:
            kept = getattr(key.packed, "block_hashes", None)
        hashes = kept if kept is not None else []
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

    def _walk(self, key: RadixKey) -> list[HashBlock]:
        """The cached blocks of ``key``'s longest cached prefix (forward walk, stops at the first miss)."""
        blocks: list[HashBlock] = []
        parent, bs = self.root_node, self.block_size
        for i, h in enumerate(self.block_hashes(key)):
            self.dict_probes += 1
            block = self.table.get(h)
            if not self._same(block, parent, key.token_ids[i * bs:(i + 1) * bs], key.extra_key):
                break
            blocks.append(block)
            parent = block
        return blocks

    # -- the tree-cache interface -----------------------------------------------------------------

    def match_prefix(self, key: Any) -> Any:
        """Longest cached prefix in whole blocks: ``MatchResult(slots, last block)``."""
        from .radix_cache import MatchResult

        blocks = self._walk(self._key(key))
        values = torch.cat([b.value for b in blocks]) if blocks else torch.empty(0, dtype=torch.int64, device=self.device)
        return MatchResult(values, blocks[-1] if blocks else self.root_node)

    def inc_lock_ref(self, node: HashBlock) -> int:
        delta = 0
        while node is not self.root_node:
            if node.lock_ref == 0:
                self.free_queue.pop(node, None)
                delta -= len(node.key)
            node.lock_ref += 1
            node = node.parent
        return delta

    def dec_lock_ref(self, node: HashBlock) -> int:
        walk = node
        while walk is not self.root_node:
            if walk.lock_ref <= 0:
                raise ValueError(f"dec_lock_ref on block {walk.id} whose lock_ref is already 0")
            walk = walk.parent
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

    @staticmethod
    def _same(block: HashBlock | None, parent: HashBlock, tokens: tuple, extra_key: Hashable | None) -> bool:
        """The collision guard. A block whose parent was evicted (an orphan, still in the table as in
        vLLM) is the same block when its tokens agree: its hash chains the same parent hash. It is
        re-linked under the live parent, and its KV is reused."""
        if block is None or block.key != tokens or block.extra_key != extra_key:
            return False
        if block.parent is not parent:
            if not block.parent.evicted:
                return False
            block.parent = parent  # an orphan is never locked: its parent's eviction proves it
        return True

    def _insert(self, key: RadixKey, slots: torch.Tensor, stop_past: int | None = None) -> list[tuple[HashBlock, bool]]:
        """Cache every full block of ``key`` (slots from ``slots``); returns the chain now cached as
        ``(block, new)`` pairs (``new``: it took our slots). Stops at a hash collision, and, with
        ``stop_past``, at the first block already cached from token ``stop_past`` on."""
        bs, parent, chain = self.block_size, self.root_node, []
        for i, h in enumerate(self.block_hashes(key)):
            tokens = key.token_ids[i * bs:(i + 1) * bs]
            block = self.table.get(h)
            new = block is None
            if not new and stop_past is not None and i * bs >= stop_past:
                break
            if new:
                block = HashBlock(h, tokens, key.extra_key, parent, slots[i * bs:(i + 1) * bs].clone(), self._next_id)
                self._next_id += 1
                self.table[h] = block
                self.free_queue[block] = None  # unlocked until someone locks it
            elif not self._same(block, parent, tokens, key.extra_key):
                break  # a collision: keep nothing past it
            chain.append((block, new))
            parent = block
        return chain

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
        key = req.radix_key(req.all_ids[:kv_len])
        if is_insert:
            chain = self._insert(key, kv)
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
        key = req.radix_key(req.fill_ids)
        pairs = self._insert(key, kv)
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
        chain = [b for b, _ in self._insert(req.radix_key(req.fill_ids), row[:req.seq_len], req.cache_protected_len)]
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
