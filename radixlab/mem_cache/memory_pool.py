"""The request table and the KV buffers: ``ReqToTokenPool`` and ``MHATokenToKVPool`` (notebooks 05, 07).

Mirrors ``sglang/srt/mem_cache/memory_pool.py``. ``ReqToTokenPool`` gives every live request a row;
entry ``[row, i]`` is the KV slot of the request's token ``i`` (slots come from the allocator,
allocator.py). ``MHATokenToKVPool`` holds per layer a K and a V buffer with one row per slot. The
index flow is tree node → request row → slot → K/V row. Differences from SGLang, on purpose: slots
and rows count from 0 and the buffers have exactly ``size`` rows (SGLang keeps slot 0 and row 0 as
dummies for padded CUDA-graph batches; radixlab never pads a batch); ``req_to_token`` is int64, so
it indexes the buffers as it is (SGLang's is int32, half the memory); a slot written into a row must
be one the allocator handed out (checked on the CPU always, on an accelerator with the debug
switch, ``radixlab.utils.debug``, since it costs a device sync); so must ``set_kv_buffer``'s ``loc``
(debug switch only: it runs on every layer of every step).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..utils import debug
from ..utils.checks import check_index_list, check_int, is_index_dtype
from .utils import check_slots


class ReqToTokenPool:
    """One row of KV slot indices per live request: ``req_to_token[row, position] -> slot``.

    Given the ``token_to_kv_pool_allocator`` whose slots the rows hold, ``write`` refuses a slot
    it did not hand out (without it, only negative slots are refused).
    """

    def __init__(self, size: int, max_context_len: int, device: str | torch.device = "cpu", *,
                 token_to_kv_pool_allocator: Any = None) -> None:
        self.size = check_int(size, "size", 1)
        self.max_context_len = check_int(max_context_len, "max_context_len", 1)
        self.device = torch.device(device)
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
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
        idx = check_int(req_pool_idx, "req_pool_idx", 0)
        if idx >= self.size:
            raise ValueError(f"req_pool_idx must be < {self.size}, got {idx}")
        if idx in self.free_slots:
            raise ValueError(f"req_pool_idx {idx} is not in use (freed twice, or never allocated)")
        self.free_slots.append(idx)

    def write(self, req_pool_idx: int, start: int, slots: torch.Tensor | Sequence[int]) -> None:
        """Store ``slots`` at ``req_to_token[req_pool_idx, start : start + len(slots)]``; refuses (changing
        nothing) a negative slot or one the allocator did not hand out (``utils.check_slots``)."""
        idx = check_int(req_pool_idx, "req_pool_idx", 0)
        start = check_int(start, "start", 0)
        if isinstance(slots, torch.Tensor) and slots.dim() == 1 and is_index_dtype(slots.dtype):
            values = slots  # fast path: already an index tensor
        else:
            values = torch.tensor(check_index_list(slots, "slots"), dtype=torch.int64)
        if idx >= self.size or idx in self.free_slots:
            raise ValueError(f"req_pool_idx {idx} is not a row in use")
        n = values.shape[0]  # (len() of a tensor costs ~0.4 us; this runs on every admit and chunk)
        if start + n > self.max_context_len:
            raise ValueError(f"writing {n} slots at position {start} overflows max_context_len="
                             f"{self.max_context_len}")
        if n:
            check_slots(values, self.token_to_kv_pool_allocator, "slots")
            self.req_to_token[idx, start:start + n] = values.to(self.req_to_token.device)

    def clear(self) -> None:
        """Every row free again (SGLang's ``ReqToTokenPool.clear``); the rows' contents are left as they are."""
        self.free_slots = list(range(self.size))

    def row(self, req_pool_idx: int, length: int) -> torch.Tensor:
        """The first ``length`` slot indices of a row (a copy)."""
        return self.req_to_token[req_pool_idx, :length].clone()


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
    With the debug switch on, ``set_kv_buffer`` checks every ``loc`` (a device sync SGLang avoids).
    """

    def __init__(self, size: int, page_size: int, dtype: torch.dtype, head_num: int, head_dim: int,
                 layer_num: int, device: str | torch.device = "cpu") -> None:
        self.size = check_int(size, "size", 1)
        self.page_size = check_int(page_size, "page_size", 1)
        if self.size % self.page_size:
            raise ValueError(f"size must be a multiple of page_size={self.page_size}, got {self.size}")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
        self.dtype = dtype
        self.head_num = check_int(head_num, "head_num", 1)
        self.head_dim = check_int(head_dim, "head_dim", 1)
        self.layer_num = check_int(layer_num, "layer_num", 1)
        self.device = torch.device(device)
        shape = (self.size, self.head_num, self.head_dim)
        self.k_buffer = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(self.layer_num)]
        self.v_buffer = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(self.layer_num)]

    def _layer(self, layer_id: Any) -> int:
        return check_int(layer_id, "layer_id", 0, self.layer_num - 1)

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
        if debug.DEBUG:
            self._check_loc(loc)
        loc = loc.to(self.device)
        self.k_buffer[layer][loc] = cache_k.to(device=self.device, dtype=self.dtype)
        self.v_buffer[layer][loc] = cache_v.to(device=self.device, dtype=self.dtype)

    def _check_loc(self, loc: torch.Tensor) -> None:
        """Every slot inside the pool, none twice (costs a device sync: debug switch only)."""
        lo, hi = int(loc.min()), int(loc.max())
        if lo < 0 or hi >= self.size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"loc holds slot {bad}, outside this pool (0 .. {self.size - 1})")
        if len(torch.unique(loc)) != len(loc):
            raise ValueError("loc holds the same slot twice (two tokens cannot share a KV row)")

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
