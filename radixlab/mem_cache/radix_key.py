"""RadixKey: a token sequence plus the namespace it lives in, and the prefix compares behind every match.

Mirrors ``RadixKey`` in SGLang's ``mem_cache/radix_cache.py``: token ids, an ``extra_key`` namespace
(a LoRA id, a cache salt...), page alignment and EAGLE's bigram view. ``RadixCache`` is built on it.
Notebooks: 01_radix_tree, 04_pages_and_namespaces (pages, namespaces, bigrams),
11_performance_boundaries (why the key is packed bytes).

Representation (differs from SGLang on purpose): the constructor converts the token ids **once**
into ``packed``, native int64 bytes (what ``array('q', ids).tobytes()`` gives, but built with
``struct``, ~2x faster; the conversion also validates every id). Comparing two runs of tokens is
then one ``memcmp`` (``bytes.startswith(edge, offset)``), and slicing copies raw bytes, never boxed
ints. ``token_ids`` and ``units`` (tuples of Python ints) are made on demand and cached, for
people and for the readable matcher (``RadixKey.match`` / ``common_prefix_len``), the one the
notebooks explain. Bools are ints to Python (and to SGLang's ``array('q')``): ``True`` reads as 1.
"""

from __future__ import annotations

import struct
from array import array
from numbers import Integral
from typing import Any, Hashable, Iterable, Iterator, Sequence

import torch

from ..utils.checks import is_index_dtype  # noqa: F401  (re-exported)

ITEM = 8  # bytes per packed token (int64)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# A compiled ``struct.Struct("<n>q")`` per token count: ``struct.pack(fmt, ...)`` parses or looks up
# its format on every call: for 1,200 ints, 8.3 us with the format string, 6.7 us compiled (timeit, 2 cores).
_PACKERS: dict[int, struct.Struct] = {}
_MAX_PACKERS = 4096


def _bad_token(token_ids: Sequence, name: str) -> Exception:
    """The clear error for the first id ``struct`` refused (found by a slow scan, only on bad input)."""
    for t in token_ids:
        if not isinstance(t, Integral):  # (a bool is an int here, as to struct and array('q'): True packs as 1)
            return TypeError(f"{name} must hold integer token ids, got {t!r} ({type(t).__name__})")
        if not _INT64_MIN <= int(t) <= _INT64_MAX:
            return ValueError(f"{name} must hold token ids that fit in int64, got {t!r}")
    return TypeError(f"{name} must be a sequence of integer token ids")


def pack_tokens(token_ids: Any, name: str = "token_ids") -> bytes:
    """Validate token ids and pack them as native int64 bytes, in one C-level pass.

    Accepts a list/tuple/range of ints, an ``array`` of ints, a 1-D integer tensor or numpy array.
    """
    if isinstance(token_ids, (list, tuple)):
        n = len(token_ids)
        packer = _PACKERS.get(n)
        if packer is None:
            if len(_PACKERS) >= _MAX_PACKERS:  # bounded: one compiled format per length seen
                _PACKERS.clear()
            packer = _PACKERS[n] = struct.Struct(f"{n}q")
        try:
            return packer.pack(*token_ids)
        except (struct.error, TypeError, OverflowError):
            raise _bad_token(token_ids, name) from None
    if isinstance(token_ids, torch.Tensor):
        if not is_index_dtype(token_ids.dtype) or token_ids.dim() != 1:
            raise TypeError(f"{name} must be a 1-D integer tensor, got {token_ids.dtype} with shape "
                            f"{tuple(token_ids.shape)}")
        return token_ids.detach().to(device="cpu", dtype=torch.int64).contiguous().numpy().tobytes()
    if isinstance(token_ids, array):
        if token_ids.typecode == "q":
            return token_ids.tobytes()
        if token_ids.typecode in "fd" or token_ids.typecode == "u" or token_ids.typecode == "w":
            raise TypeError(f"{name} must hold integer token ids, got array('{token_ids.typecode}')")
        return array("q", token_ids).tobytes()
    if type(token_ids).__module__ == "numpy" and hasattr(token_ids, "dtype"):
        if token_ids.dtype.kind not in "iu" or token_ids.ndim != 1:
            raise TypeError(f"{name} must be a 1-D integer array, got {token_ids.dtype} with shape {token_ids.shape}")
        return token_ids.astype("int64").tobytes()
    if isinstance(token_ids, (str, bytes, bytearray, memoryview)) or not isinstance(token_ids, Iterable):
        raise TypeError(f"{name} must be a sequence of integer token ids, got {type(token_ids).__name__}")
    return pack_tokens(tuple(token_ids), name)  # range, generators, other iterables


def unpack_tokens(packed: bytes) -> tuple[int, ...]:
    """The token ids of a packed run, as a tuple of Python ints."""
    return tuple(array("q", packed)) if packed else ()


def _as_token_tuple(token_ids: Any, name: str = "token_ids") -> tuple[int, ...]:
    """Validate and normalise token ids to a tuple of Python ints (via the packed form)."""
    if isinstance(token_ids, RadixKey):
        return token_ids.token_ids
    return unpack_tokens(pack_tokens(token_ids, name))


def common_prefix_len(a: Sequence, b: Sequence) -> int:
    """Length of the common prefix of two tuples, found with C-level slice compares.

    The readable compare (notebook 01): a per-token Python loop costs ~50 ns a token; comparing
    halving windows costs a few C-level compares. ``packed_prefix_len`` does the same on bytes.
    """
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def packed_prefix_len(edge: bytes, query: bytes, offset: int = 0) -> int:
    """Tokens shared by ``edge`` and ``query[offset:]`` (both packed; ``offset`` in bytes).

    One ``memcmp`` of the whole overlap, then a binary search for the first mismatch: each probe
    is one ``memcmp`` (``query.startswith(view, offset)`` on a zero-copy ``memoryview`` window of
    the edge), log2(n) probes wherever the mismatch is. SGLang's ``RadixKey.match`` gallops
    instead (windows of 1, 2, 4... tokens, then a binary search inside the window that failed):
    it runs on every edge, and galloping keeps an early mismatch cheap. Here the search runs only
    after the whole-edge compare failed, so an edge that matches never gets here, and a mismatch
    deep in a long edge (a new question after a shared system prompt) costs log2(n) probes, not
    2 * log2(position).
    """
    n = min(len(edge), len(query) - offset) // ITEM
    if n <= 0:
        return 0
    view = memoryview(edge)
    if query.startswith(view[:n * ITEM], offset):
        return n
    lo, hi = 0, n  # invariant: the first lo tokens agree; tokens [lo, hi) hold the first mismatch
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if query.startswith(view[lo * ITEM:mid * ITEM], offset + lo * ITEM):
            lo = mid
        else:
            hi = mid
    return lo


class RadixKey:
    """A token sequence plus the namespace it lives in.

    ``extra_key`` (a LoRA id, a cache salt, a multimodal hash...) is part of the key: equal tokens
    under different extra keys are different keys. ``is_bigram=True`` gives EAGLE's view, where the
    units are overlapping token pairs ``(t[i], t[i+1])``: N raw tokens make N-1 units.
    ``packed`` holds the raw token ids as int64 bytes (see the module docstring).
    """

    __slots__ = ("packed", "extra_key", "is_bigram", "_tokens", "_units")

    def __init__(self, token_ids: Any, extra_key: Hashable | None = None, is_bigram: bool = False) -> None:
        if extra_key is not None and not isinstance(extra_key, Hashable):
            raise TypeError(f"extra_key must be hashable (a str, usually), got {type(extra_key).__name__}")
        if isinstance(token_ids, RadixKey):  # re-wrapping a key: it keeps its namespace, never mixes two
            if extra_key is not None and extra_key != token_ids.extra_key:
                raise ValueError(f"cannot mix namespaces in one key: token_ids already carry extra_key "
                                 f"{token_ids.extra_key!r}, got extra_key={extra_key!r}")
            extra_key, packed = token_ids.extra_key, token_ids.packed
        else:
            packed = pack_tokens(token_ids)
        self.packed: bytes = packed
        self.extra_key = extra_key
        self.is_bigram = bool(is_bigram)
        self._tokens: tuple[int, ...] | None = None
        self._units: tuple | None = None

    @classmethod
    def from_packed(cls, packed: bytes, extra_key: Hashable | None = None, is_bigram: bool = False) -> RadixKey:
        """A key over already packed (validated) int64 bytes: no conversion, no copy."""
        if not isinstance(packed, bytes) or len(packed) % ITEM:
            raise TypeError(f"packed must be bytes holding int64 token ids (a multiple of {ITEM} bytes)")
        return key_over(packed, extra_key, is_bigram, cls)

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The raw token ids (made from ``packed`` on first use)."""
        if self._tokens is None:
            self._tokens = unpack_tokens(self.packed)
        return self._tokens

    @property
    def units(self) -> tuple:
        """What the tree matches on: tokens, or token pairs in the bigram view."""
        if self._units is None:
            t = self.token_ids
            self._units = tuple(zip(t, t[1:])) if self.is_bigram else t
        return self._units

    def __len__(self) -> int:
        n = len(self.packed) >> 3
        return (n - 1 if n else 0) if self.is_bigram else n

    def __iter__(self) -> Iterator:
        return iter(self.units)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, RadixKey) and self.packed == other.packed
                and self.extra_key == other.extra_key and self.is_bigram == other.is_bigram)

    def __hash__(self) -> int:
        return hash((self.packed, self.extra_key, self.is_bigram))

    def __getitem__(self, idx: int | slice) -> RadixKey:
        """A slice is a key; an int ``i`` is the one-unit key ``self[i:i+1]`` (negative counts from
        the end; IndexError out of range), in the same namespace, as SGLang's ``RadixKey``."""
        if isinstance(idx, Integral) and not isinstance(idx, bool):
            n = len(self)
            i = int(idx) + n if idx < 0 else int(idx)
            if not 0 <= i < n:
                raise IndexError(f"RadixKey index out of range: {int(idx)} (len {n})")
            idx = slice(i, i + 1)
        elif not isinstance(idx, slice):
            raise TypeError(f"RadixKey indices must be an int or a slice, got {type(idx).__name__}")
        start, stop, step = idx.indices(len(self))
        if step != 1:
            raise ValueError(f"RadixKey slice step must be 1, got {step}")
        stop = max(start, stop)
        if self.is_bigram:  # units [start, stop) span raw tokens [start, stop + 1)
            raw = (start, stop + 1) if stop > start else (start, start)
        else:
            raw = (start, stop)
        key = RadixKey.from_packed(self.packed[raw[0] * ITEM: raw[1] * ITEM], self.extra_key, self.is_bigram)
        if self._tokens is not None:  # keep the readable form if it was made (the readable matcher slices)
            key._tokens = self._tokens[raw[0]:raw[1]]
            if self._units is not None:
                key._units = self._units[start:stop]
        return key

    def __repr__(self) -> str:
        ids = list(unpack_tokens(self.packed[: 8 * ITEM]))
        more = ", ..." if len(self.packed) > 8 * ITEM else ""
        extra = f", extra_key={self.extra_key!r}" if self.extra_key is not None else ""
        big = ", is_bigram=True" if self.is_bigram else ""
        return f"RadixKey({str(ids)[:-1]}{more}]{extra}{big})"

    def page_aligned(self, page_size: int) -> RadixKey:
        """The longest prefix whose length is a multiple of ``page_size``."""
        if page_size == 1:
            return self
        n = len(self) // page_size * page_size
        return self if n == len(self) else self[:n]

    def to_bigram(self) -> RadixKey:
        """The EAGLE bigram view of the same tokens."""
        return self if self.is_bigram else RadixKey.from_packed(self.packed, self.extra_key, is_bigram=True)

    def child_key(self, page_size: int = 1) -> Hashable:
        """Dict key for a child edge starting with this key: its first unit (or page), namespaced.

        The first page's packed bytes stand in for its token ids (same equality, cheaper to make
        and hash); like SGLang, a key outside any namespace is not wrapped in a tuple.
        """
        first = self.packed[: (page_size + self.is_bigram) * ITEM]
        return first if self.extra_key is None else (self.extra_key, first)

    def match(self, other: RadixKey, page_size: int = 1) -> int:
        """Units shared at the start of both keys, rounded down to whole pages (the readable compare)."""
        if self.extra_key != other.extra_key:
            raise ValueError(f"cannot match keys from different namespaces: extra_key "
                             f"{self.extra_key!r} != {other.extra_key!r}")
        if self.is_bigram != other.is_bigram:
            raise ValueError("cannot match a bigram key against a token key")
        n = common_prefix_len(self.units, other.units)
        return n if page_size == 1 else n // page_size * page_size


def key_over(packed: bytes, extra_key: Hashable | None, is_bigram: bool, cls: type = RadixKey) -> RadixKey:
    """A key over packed bytes *without* checking them: for bytes sliced from a key that passed
    ``from_packed``'s checks (the fast matcher's new leaves). No conversion, no copy."""
    key = object.__new__(cls)
    key.packed, key.extra_key, key.is_bigram, key._tokens, key._units = packed, extra_key, is_bigram, None, None
    return key
