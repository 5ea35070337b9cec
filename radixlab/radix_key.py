"""RadixKey: a token sequence plus the namespace it lives in, and the prefix compare behind every match.

Mirrors ``RadixKey`` in SGLang's ``mem_cache/radix_cache.py``: token ids, an ``extra_key`` namespace
(a LoRA id, a cache salt...), page alignment and EAGLE's bigram view. ``RadixCache`` is built on it.
Notebooks: 01_radix_tree, 04_pages_and_namespaces (pages, namespaces, bigrams).
"""

from __future__ import annotations

from numbers import Integral
from typing import Any, Hashable, Iterable, Iterator, Sequence

import torch



def _as_token_tuple(token_ids: Any, name: str = "token_ids") -> tuple[int, ...]:
    """Validate and normalise token ids to a tuple of Python ints."""
    if isinstance(token_ids, torch.Tensor):
        if token_ids.dtype.is_floating_point or token_ids.dtype == torch.bool or token_ids.dim() != 1:
            raise TypeError(f"{name} must be a 1-D integer tensor, got {token_ids.dtype} with shape {tuple(token_ids.shape)}")
        return tuple(token_ids.tolist())
    if isinstance(token_ids, (str, bytes)) or not isinstance(token_ids, Iterable):
        raise TypeError(f"{name} must be a sequence of integer token ids, got {type(token_ids).__name__}")
    out = tuple(token_ids)
    if all(type(t) is int for t in out):  # fast path: ~30x cheaper than the Integral checks below
        return out
    for t in out:
        if isinstance(t, bool) or not isinstance(t, Integral):
            raise TypeError(f"{name} must hold integer token ids, got {t!r} ({type(t).__name__})")
    return tuple(int(t) for t in out)


def common_prefix_len(a: Sequence, b: Sequence) -> int:
    """Length of the common prefix of two tuples, found with C-level slice compares.

    A per-token Python loop costs ~50 ns a token; comparing halving windows costs a few memcmp-like
    calls, which is what makes a 32k-token match cheap (``python -m radixlab bench lookup``).
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


class RadixKey:
    """A token sequence plus the namespace it lives in.

    ``extra_key`` (a LoRA id, a cache salt, a multimodal hash...) is part of the key: equal tokens
    under different extra keys are different keys. ``is_bigram=True`` gives EAGLE's view, where the
    units are overlapping token pairs ``(t[i], t[i+1])``: N raw tokens make N-1 units.
    """

    __slots__ = ("token_ids", "extra_key", "is_bigram", "_units")

    def __init__(self, token_ids: Any, extra_key: Hashable | None = None, is_bigram: bool = False) -> None:
        if extra_key is not None and not isinstance(extra_key, Hashable):
            raise TypeError(f"extra_key must be hashable (a str, usually), got {type(extra_key).__name__}")
        if isinstance(token_ids, RadixKey):  # re-wrapping a key: it keeps its namespace, never mixes two
            if extra_key is not None and extra_key != token_ids.extra_key:
                raise ValueError(f"cannot mix namespaces in one key: token_ids already carry extra_key "
                                 f"{token_ids.extra_key!r}, got extra_key={extra_key!r}")
            extra_key, token_ids = token_ids.extra_key, token_ids.token_ids
        self.token_ids: tuple[int, ...] = _as_token_tuple(token_ids)
        self.extra_key = extra_key
        self.is_bigram = bool(is_bigram)
        t = self.token_ids
        self._units: tuple = tuple(zip(t, t[1:])) if self.is_bigram else t

    @property
    def units(self) -> tuple:
        """What the tree matches on: tokens, or token pairs in the bigram view."""
        return self._units

    def __len__(self) -> int:
        return len(self._units)

    def __iter__(self) -> Iterator:
        return iter(self._units)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, RadixKey) and self.token_ids == other.token_ids
                and self.extra_key == other.extra_key and self.is_bigram == other.is_bigram)

    def __hash__(self) -> int:
        return hash((self.token_ids, self.extra_key, self.is_bigram))

    def __getitem__(self, idx: slice) -> RadixKey:
        if not isinstance(idx, slice):
            raise TypeError("RadixKey supports slicing only, e.g. key[:4]")
        start, stop, step = idx.indices(len(self))
        if step != 1:
            raise ValueError(f"RadixKey slice step must be 1, got {step}")
        stop = max(start, stop)
        if self.is_bigram:
            # units [start, stop) span raw tokens [start, stop + 1)
            raw = self.token_ids[start:stop + 1] if stop > start else ()
        else:
            raw = self.token_ids[start:stop]
        return RadixKey._make(raw, self.extra_key, self.is_bigram, self._units[start:stop])

    @classmethod
    def _make(cls, raw: tuple, extra_key: Hashable | None, is_bigram: bool, units: tuple) -> RadixKey:
        # Fast internal constructor: inputs are already validated.
        key = cls.__new__(cls)
        key.token_ids, key.extra_key, key.is_bigram, key._units = raw, extra_key, is_bigram, units
        return key

    def __repr__(self) -> str:
        ids = list(self.token_ids[:8])
        more = ", ..." if len(self.token_ids) > 8 else ""
        extra = f", extra_key={self.extra_key!r}" if self.extra_key is not None else ""
        big = ", is_bigram=True" if self.is_bigram else ""
        return f"RadixKey({str(ids)[:-1]}{more}]{extra}{big})"

    def page_aligned(self, page_size: int) -> RadixKey:
        """The longest prefix whose length is a multiple of ``page_size``."""
        return self if page_size == 1 else self[: len(self) // page_size * page_size]

    def to_bigram(self) -> RadixKey:
        """The EAGLE bigram view of the same tokens."""
        return self if self.is_bigram else RadixKey(self.token_ids, self.extra_key, is_bigram=True)

    def child_key(self, page_size: int = 1) -> tuple:
        """Dict key for a child edge starting with this key: (namespace, first unit or page)."""
        first = self._units[0] if page_size == 1 else self._units[:page_size]
        return (self.extra_key, first)

    def match(self, other: RadixKey, page_size: int = 1) -> int:
        """Units shared at the start of both keys, rounded down to whole pages."""
        if self.extra_key != other.extra_key:
            raise ValueError(f"cannot match keys from different namespaces: extra_key "
                             f"{self.extra_key!r} != {other.extra_key!r}")
        if self.is_bigram != other.is_bigram:
            raise ValueError("cannot match a bigram key against a token key")
        n = common_prefix_len(self._units, other._units)
        return n if page_size == 1 else n // page_size * page_size
