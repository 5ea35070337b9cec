"""The chained-hash block prefix cache: the baseline the radix tree replaced (notebook 03_hash_vs_radix).

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

from ..utils.checks import check_int, is_index_dtype
from .radix_key import RadixKey, _as_token_tuple
from .utils import abbreviate

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
    check_int(block_size, "block_size", 1)


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
        ids = {id(b): i for i, b in enumerate(self.table.values())}
        lines = [f"hash table  ({len(self.table)} blocks of {self.block_size} tokens)"]
        for i, b in enumerate(self.table.values()):
            parent = "-" if b.parent is None else f"#{ids[id(b.parent)]}"
            ns = f" ns={b.extra_key!r}" if b.extra_key is not None else ""
            lines.append(f"#{i:<3} h={b.hash & 0xFFFFFFFF:08x}…  parent={parent:<4} "
                         f"tokens={abbreviate(b.tokens, max_tokens)}{ns} ref={b.ref}")
        return "\n".join(lines)
