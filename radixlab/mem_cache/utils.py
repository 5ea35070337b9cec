"""Small helpers the caches share: slot checks, index tensors from packed bytes, text forms."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch

from ..utils import debug
from ..utils.checks import is_index_dtype
from .allocator import TokenToKVPoolAllocator
from .radix_key import ITEM, pack_tokens

if TYPE_CHECKING:
    from .radix_cache import TreeNode
    from .radix_key import RadixKey


def check_slots(slots: torch.Tensor, allocator: Any, name: str) -> None:
    """Refuse slots that cannot be KV slots of ``allocator``'s pool: negative, past its end, or not
    handed out by it (free, or another pool's). Vector ops on the host, a few microseconds; on an
    accelerator it would cost a device sync, so there it runs only with the debug switch."""
    if slots.device.type != "cpu" and not debug.DEBUG:
        return
    if not slots.numel():
        return
    if not isinstance(allocator, TokenToKVPoolAllocator):  # none, or one of the tests' recorders
        lo = int(slots.min())  # one reduction, a few us for a 1,200-token insert (aminmax costs twice that)
        if lo < 0:
            raise ValueError(f"{name} holds slot {lo}: KV slots are >= 0")
        return
    lo, hi = (int(x) for x in torch.aminmax(slots))
    if lo < 0:
        raise ValueError(f"{name} holds slot {lo}: KV slots are >= 0")
    if hi >= allocator.size:
        raise ValueError(f"{name} holds slot {hi}, outside this pool (0 .. {allocator.size - 1})")
    allocator.check_in_use(slots, name)


def slot_tensor(key: RadixKey, value: Any, device: torch.device) -> torch.Tensor:
    """``value`` checked as one slot index per unit of ``key``: an int64 tensor on ``device``."""
    if value is None:  # simulation fallback: slot i := token id i (the first token of a bigram)
        return int64_tensor(key.packed[: len(key) * ITEM]).to(device)
    if not isinstance(value, torch.Tensor):
        value = int64_tensor(pack_tokens(value, "value"))
    dtype = value.dtype
    if dtype is not torch.int64 and not is_index_dtype(dtype) or value.dim() != 1:
        raise TypeError(f"value must be a 1-D integer tensor of slot indices, got {value.dtype} "
                        f"with shape {tuple(value.shape)}")
    n_raw, n_value = len(key.packed) >> 3, value.numel()
    n = n_raw - 1 if key.is_bigram and n_raw else n_raw  # len(key), without the method call
    if n_value != n and n_value != n_raw:  # n_raw != n only for bigram keys
        raise ValueError(f"value must hold one slot index per token: len(value)={n_value} "
                         f"but len(key)={n}")
    if dtype is not torch.int64 or value.device != device:
        value = value.to(device=device, dtype=torch.int64)  # indices live with the KV pool
    return value if n_value == n else value[:n]


def int64_tensor(packed: bytes) -> torch.Tensor:
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
