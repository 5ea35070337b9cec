"""Who owns which KV slot: the request pool and the slot allocator (notebook 05_request_lifecycle_and_locks).

Mirrors ``sglang/srt/mem_cache/memory_pool.py`` and its allocators. Two tables of *indices*, no
K/V data (the KV buffers themselves are ``MHATokenToKVPool``, taught with the model):

* ``ReqToTokenPool`` gives every live request a row; entry ``[row, i]`` is the KV slot that holds
  token ``i`` of that request. Attention reads a request's K/V through its row.
* ``TokenToKVPoolAllocator`` hands out KV slots from a free list, one page (``page_size`` slots)
  at a time, and takes them back. Slot ``s`` lives in page ``s // page_size``, and a request's token
  at position ``p`` always sits at page offset ``p % page_size`` (``alloc_extend`` keeps it so).
* ``MHATokenToKVPool`` (notebook 07_kv_memory_pool) holds the K/V tensors themselves: per layer a
  K and a V buffer with one row per slot. The index flow is tree node → request row → slot → K/V row.

Every slot is at any moment in exactly one place: the free list, a radix-tree node, or the tail of
one live request's row (``tests/test_lifecycle.py`` checks this after every step).

Choices that differ from SGLang, on purpose: slots count from 0 (SGLang keeps slot 0 and request
row 0 as dummies for padded CUDA-graph batches; its KV buffers have ``size + page_size`` rows, the
extra page absorbing writes of padded tokens — radixlab never pads a batch, so every buffer row is a
real slot); freeing a slot twice or a slot never handed out is
an error here (SGLang trusts its callers), because finding such bugs is what the course is about.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any, Sequence

import torch

from .radix_key import is_index_dtype


def _check_int(value: Any, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _as_index_list(indices: Any, name: str) -> list[int]:
    if isinstance(indices, torch.Tensor):
        if not is_index_dtype(indices.dtype) or indices.dim() != 1:
            raise TypeError(f"{name} must be a 1-D integer tensor, got {indices.dtype} with shape "
                            f"{tuple(indices.shape)}")
        return indices.tolist()  # an integer tensor's tolist() is already Python ints
    if isinstance(indices, (str, bytes)) or not isinstance(indices, Sequence):
        raise TypeError(f"{name} must be a sequence or tensor of slot indices, got {type(indices).__name__}")
    out = []
    for i in indices:
        if isinstance(i, bool) or not isinstance(i, Integral):
            raise TypeError(f"{name} must hold integer slot indices, got {i!r}")
        out.append(int(i))
    return out


class ReqToTokenPool:
    """One row of KV slot indices per live request: ``req_to_token[row, position] -> slot``."""

    def __init__(self, size: int, max_context_len: int, device: str | torch.device = "cpu") -> None:
        self.size = _check_int(size, "size", 1)
        self.max_context_len = _check_int(max_context_len, "max_context_len", 1)
        self.device = torch.device(device)
        self.req_to_token = torch.zeros((self.size, self.max_context_len), dtype=torch.int64, device=self.device)
        self.clear()

    def available_size(self) -> int:
        """Rows free for new requests."""
        return len(self.free_slots)

    def alloc(self) -> int:
        """Take a free row for a new request (the scheduler stores it in ``req.req_pool_idx``)."""
        if not self.free_slots:
            raise RuntimeError(f"ReqToTokenPool is full: all {self.size} request rows are in use "
                               "(finish a request, or make the pool bigger)")
        return self.free_slots.pop(0)

    def free(self, req_pool_idx: int) -> None:
        """Give a finished request's row back."""
        idx = _check_int(req_pool_idx, "req_pool_idx")
        if idx >= self.size:
            raise ValueError(f"req_pool_idx must be < {self.size}, got {idx}")
        if idx in self.free_slots:
            raise ValueError(f"req_pool_idx {idx} is not in use (freed twice, or never allocated)")
        self.free_slots.append(idx)

    def write(self, req_pool_idx: int, start: int, slots: torch.Tensor | Sequence[int]) -> None:
        """Store ``slots`` at ``req_to_token[req_pool_idx, start : start + len(slots)]``."""
        idx = _check_int(req_pool_idx, "req_pool_idx")
        start = _check_int(start, "start")
        if isinstance(slots, torch.Tensor) and slots.dim() == 1 and is_index_dtype(slots.dtype):
            values = slots  # fast path: already an index tensor
        else:
            values = torch.tensor(_as_index_list(slots, "slots"), dtype=torch.int64)
        if idx >= self.size or idx in self.free_slots:
            raise ValueError(f"req_pool_idx {idx} is not a row in use")
        n = values.shape[0]  # (len() of a tensor costs ~0.4 us; this runs on every admit and chunk)
        if start + n > self.max_context_len:
            raise ValueError(f"writing {n} slots at position {start} overflows max_context_len="
                             f"{self.max_context_len}")
        if n:
            self.req_to_token[idx, start:start + n] = values.to(self.req_to_token.device)

    def clear(self) -> None:
        """Every row free again (SGLang's ``ReqToTokenPool.clear``); the rows' contents are left as they are."""
        self.free_slots = list(range(self.size))

    def row(self, req_pool_idx: int, length: int) -> torch.Tensor:
        """The first ``length`` slot indices of a row (a copy)."""
        return self.req_to_token[req_pool_idx, :length].clone()


class TokenToKVPoolAllocator:
    """A free list of KV slots, handed out in whole pages of ``page_size`` consecutive slots.

    ``alloc(n)`` returns ``n`` slot indices (``n`` a multiple of ``page_size``) or ``None`` when
    there are not enough free pages — then nothing changed, and the scheduler asks the radix cache
    to ``evict`` and tries again. ``free(indices)`` gives back the pages those slots belong to.
    """

    def __init__(self, size: int, page_size: int = 1, device: str | torch.device = "cpu") -> None:
        self.page_size = _check_int(page_size, "page_size", 1)
        self.size = _check_int(size, "size", 1)
        if self.size % self.page_size:
            raise ValueError(f"size must be a multiple of page_size={self.page_size}, got {self.size}")
        self.device = torch.device(device)
        self.num_pages = self.size // self.page_size
        self.clear()

    def clear(self) -> None:
        """Every page free again (in order: page 0 is handed out first)."""
        self.free_pages: list[int] = list(range(self.num_pages))
        self._in_use: set[int] = set()

    def available_size(self) -> int:
        """Free slots (free pages × page_size)."""
        return len(self.free_pages) * self.page_size

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """``need_size`` slots as whole pages, oldest-freed page first; ``None`` if they do not fit."""
        n = _check_int(need_size, "need_size")
        if n % self.page_size:
            raise ValueError(f"need_size must be a multiple of page_size={self.page_size}, got {n}")
        num = n // self.page_size
        if num > len(self.free_pages):
            return None
        pages, self.free_pages = self.free_pages[:num], self.free_pages[num:]
        self._in_use.update(pages)
        return self._slots_of(pages)

    def alloc_extend(self, prefix_len: int, last_loc: int, extend_len: int) -> torch.Tensor | None:
        """Slots for tokens ``prefix_len .. prefix_len + extend_len - 1`` of one request.

        The first ones fill the rest of the page that holds ``last_loc`` (the slot of token
        ``prefix_len - 1``), the others come from new pages, so token ``p`` keeps page offset
        ``p % page_size``. ``None`` (and nothing changed) when the new pages do not fit.
        """
        prefix_len = _check_int(prefix_len, "prefix_len")
        extend_len = _check_int(extend_len, "extend_len")
        room = (-prefix_len) % self.page_size  # free slots left in the request's last page
        if room:
            last_loc = _check_int(last_loc, "last_loc")
            if last_loc // self.page_size not in self._in_use or last_loc % self.page_size != (prefix_len - 1) % self.page_size:
                raise ValueError(f"last_loc={last_loc} is not the slot of token {prefix_len - 1} in an allocated page")
        take = min(room, extend_len)
        head = torch.arange(last_loc + 1, last_loc + 1 + take, dtype=torch.int64, device=self.device) if take else None
        rest = extend_len - take
        new = self.alloc(-(-rest // self.page_size) * self.page_size)
        if new is None:
            return None
        parts = ([head] if head is not None else []) + [new[:rest]]
        return torch.cat(parts).to(self.device)

    def free(self, free_index: torch.Tensor | Sequence[int]) -> None:
        """Give back the pages holding these slots. Raises (changing nothing) on a page not in use."""
        slots = _as_index_list(free_index, "free_index")
        if not slots:
            return
        bad = [s for s in slots if not 0 <= s < self.size]
        if bad:
            raise ValueError(f"free_index holds slot {bad[0]}, outside this pool (0 .. {self.size - 1})")
        if self.page_size == 1 and len(set(slots)) != len(slots):
            dup = next(s for s in slots if slots.count(s) > 1)
            raise ValueError(f"free_index holds slot {dup} twice")
        pages = list(dict.fromkeys(s // self.page_size for s in slots))
        not_used = [p for p in pages if p not in self._in_use]
        if not_used:
            what = "slot" if self.page_size == 1 else "page"
            raise ValueError(f"cannot free {what} {not_used[0]}: it is not allocated "
                             "(freed twice, or never handed out)")
        self._in_use.difference_update(pages)
        self.free_pages.extend(pages)

    def _slots_of(self, pages: list[int]) -> torch.Tensor:
        if not pages:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        base = torch.tensor(pages, dtype=torch.int64).repeat_interleave(self.page_size) * self.page_size
        return (base + torch.arange(self.page_size).repeat(len(pages))).to(self.device)

    def pages_in_use(self) -> set[int]:
        """Pages handed out and not yet freed (what the leak checks compare against)."""
        return set(self._in_use)

    def __repr__(self) -> str:
        return (f"TokenToKVPoolAllocator(size={self.size}, page_size={self.page_size}, "
                f"available={self.available_size()})")


class MHATokenToKVPool:
    """The KV cache itself: per layer a K and a V buffer of shape ``(size, head_num, head_dim)``.

    Row ``s`` of every buffer belongs to slot ``s`` handed out by ``TokenToKVPoolAllocator`` (built
    with the same ``size`` and ``page_size``). ``RadixAttention`` writes a new token's K/V with
    ``set_kv_buffer(layer_id, out_cache_loc, k, v)`` and reads a request's K/V by gathering the rows
    its ``ReqToTokenPool`` row names. Notebook 07_kv_memory_pool teaches it.

    Padding, a choice that differs from SGLang: SGLang allocates ``size + page_size`` rows, the extra
    page 0 being the target of dummy writes from padded CUDA-graph batches, and its allocator starts
    at page 1. radixlab never pads a batch, so slots count from 0, the buffers have exactly ``size``
    rows, and a write to a slot outside ``0 .. size - 1`` is an error rather than a dummy.
    ``set_kv_buffer`` checks every ``loc`` (a device sync SGLang avoids) and changes nothing on error.
    """

    def __init__(self, size: int, page_size: int, dtype: torch.dtype, head_num: int, head_dim: int,
                 layer_num: int, device: str | torch.device = "cpu") -> None:
        self.size = _check_int(size, "size", 1)
        self.page_size = _check_int(page_size, "page_size", 1)
        if self.size % self.page_size:
            raise ValueError(f"size must be a multiple of page_size={self.page_size}, got {self.size}")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
        self.dtype = dtype
        self.head_num = _check_int(head_num, "head_num", 1)
        self.head_dim = _check_int(head_dim, "head_dim", 1)
        self.layer_num = _check_int(layer_num, "layer_num", 1)
        self.device = torch.device(device)
        shape = (self.size, self.head_num, self.head_dim)
        self.k_buffer = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(self.layer_num)]
        self.v_buffer = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(self.layer_num)]

    def _layer(self, layer_id: Any) -> int:
        if isinstance(layer_id, bool) or not isinstance(layer_id, Integral) or not 0 <= layer_id < self.layer_num:
            raise ValueError(f"layer_id must be an int in 0 .. {self.layer_num - 1}, got {layer_id!r}")
        return int(layer_id)

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        """Layer ``layer_id``'s K buffer, ``(size, head_num, head_dim)`` (the tensor itself, not a copy)."""
        return self.k_buffer[self._layer(layer_id)]

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        """Layer ``layer_id``'s V buffer, ``(size, head_num, head_dim)`` (the tensor itself, not a copy)."""
        return self.v_buffer[self._layer(layer_id)]

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor) -> None:
        """Store token ``i``'s K/V (``cache_k[i]``, ``cache_v[i]``) in row ``loc[i]`` of layer ``layer_id``.

        ``loc`` is a 1-D integer tensor of slots (the batch's ``out_cache_loc``); ``cache_k`` and
        ``cache_v`` are ``(len(loc), head_num, head_dim)`` and are cast to the pool's dtype.
        (SGLang passes the ``RadixAttention`` layer object; here its ``layer_id`` is enough.)
        """
        layer = self._layer(layer_id)
        if not isinstance(loc, torch.Tensor) or loc.dim() != 1 or loc.dtype not in (torch.int64, torch.int32):
            what = f"{loc.dtype} tensor with shape {tuple(loc.shape)}" if isinstance(loc, torch.Tensor) else type(loc).__name__
            raise ValueError(f"loc must be a 1-D int64 or int32 tensor of slots, got {what}")
        want = (len(loc), self.head_num, self.head_dim)
        for name, t in (("cache_k", cache_k), ("cache_v", cache_v)):
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != want:
                got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"{name} must have shape {want} (len(loc), head_num, head_dim), got {got}")
        if len(loc) == 0:
            return
        lo, hi = int(loc.min()), int(loc.max())
        if lo < 0 or hi >= self.size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"loc holds slot {bad}, outside this pool (0 .. {self.size - 1})")
        if len(torch.unique(loc)) != len(loc):
            raise ValueError("loc holds the same slot twice (two tokens cannot share a KV row)")
        loc = loc.to(self.device)
        self.k_buffer[layer][loc] = cache_k.to(device=self.device, dtype=self.dtype)
        self.v_buffer[layer][loc] = cache_v.to(device=self.device, dtype=self.dtype)

    def get_kv_size_bytes(self) -> tuple[int, int]:
        """Bytes held by all K buffers and by all V buffers, as SGLang returns them: ``(k_bytes, v_bytes)``."""
        k = sum(b.numel() * b.element_size() for b in self.k_buffer)
        v = sum(b.numel() * b.element_size() for b in self.v_buffer)
        return k, v

    def clear(self) -> None:
        """Zero every buffer (slots keep no stale K/V between runs; not needed for correctness)."""
        for b in self.k_buffer + self.v_buffer:
            b.zero_()

    def __repr__(self) -> str:
        k, v = self.get_kv_size_bytes()
        return (f"MHATokenToKVPool(size={self.size}, page_size={self.page_size}, dtype={self.dtype}, "
                f"head_num={self.head_num}, head_dim={self.head_dim}, layer_num={self.layer_num}, "
                f"device={self.device}, bytes={k + v})")
