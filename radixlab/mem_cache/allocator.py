"""``TokenToKVPoolAllocator``: who owns which KV slot, handed out a page at a time (notebook 05).

Mirrors SGLang's ``mem_cache/allocator`` (``TokenToKVPoolAllocator``, ``PagedTokenToKVPoolAllocator``
in one class). Slot ``s`` lives in page ``s // page_size``, and a request's token at position ``p``
always sits at page offset ``p % page_size`` (``alloc_extend`` keeps it so). Every slot is at any
moment in exactly one place: the free list, a cache node, or the tail of one live request's row
(tests/test_lifecycle.py checks it after every step). Differences from SGLang, on purpose: slots
count from 0 (no dummy page 0: radixlab never pads a batch); freeing a slot twice or one never
handed out raises (SGLang trusts its callers), because finding such bugs is what the course is about.
Differences for simplicity: freed pages go to the back of the free list (SGLang's paged allocator puts
them in front, so the page freed last is handed out first); one ``free`` per call (SGLang also has
``free_segment``, which skips a device ``unique``, and ``free_group_begin/end`` to batch many frees).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..utils.checks import check_index_list, check_int


class TokenToKVPoolAllocator:
    """A free list of KV slots, handed out in whole pages of ``page_size`` consecutive slots.

    ``alloc(n)`` returns ``n`` slot indices (``n`` a multiple of ``page_size``) or ``None`` when
    there are not enough free pages — then nothing changed, and the scheduler asks the radix cache
    to ``evict`` and tries again. ``free(indices)`` gives back the pages those slots belong to.
    """

    def __init__(self, size: int, page_size: int = 1, device: str | torch.device = "cpu") -> None:
        self.page_size = check_int(page_size, "page_size", 1)
        self.size = check_int(size, "size", 1)
        if self.size % self.page_size:
            raise ValueError(f"size must be a multiple of page_size={self.page_size}, got {self.size}")
        self.device = torch.device(device)
        self.num_pages = self.size // self.page_size
        self.clear()

    def clear(self) -> None:
        """Every page free again (in order: page 0 is handed out first)."""
        self.free_pages: list[int] = list(range(self.num_pages))
        self._in_use: set[int] = set()
        self._in_use_mask = torch.zeros(self.num_pages, dtype=torch.bool)  # the same set, for vector checks

    def available_size(self) -> int:
        """Free slots (free pages × page_size)."""
        return len(self.free_pages) * self.page_size

    def alloc(self, need_size: int) -> torch.Tensor | None:
        """``need_size`` slots as whole pages, oldest-freed page first; ``None`` if they do not fit."""
        n = check_int(need_size, "need_size", 0)
        if n % self.page_size:
            raise ValueError(f"need_size must be a multiple of page_size={self.page_size}, got {n}")
        num = n // self.page_size
        if num > len(self.free_pages):
            return None
        pages, self.free_pages = self.free_pages[:num], self.free_pages[num:]
        self._in_use.update(pages)
        self._in_use_mask[pages] = True
        return self._slots_of(pages)

    def alloc_extend(self, prefix_len: int, last_loc: int, extend_len: int) -> torch.Tensor | None:
        """Slots for tokens ``prefix_len .. prefix_len + extend_len - 1`` of one request.

        The first ones fill the rest of the page that holds ``last_loc`` (the slot of token
        ``prefix_len - 1``), the others come from new pages, so token ``p`` keeps page offset
        ``p % page_size``. ``None`` (and nothing changed) when the new pages do not fit.
        """
        prefix_len = check_int(prefix_len, "prefix_len", 0)
        extend_len = check_int(extend_len, "extend_len", 0)
        room = (-prefix_len) % self.page_size  # free slots left in the request's last page
        if room:
            last_loc = check_int(last_loc, "last_loc", 0)
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
        slots = check_index_list(free_index, "free_index")
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
        self._in_use_mask[pages] = False
        self.free_pages.extend(pages)

    def _slots_of(self, pages: list[int]) -> torch.Tensor:
        if not pages:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        base = torch.tensor(pages, dtype=torch.int64).repeat_interleave(self.page_size) * self.page_size
        return (base + torch.arange(self.page_size).repeat(len(pages))).to(self.device)

    def check_in_use(self, slots: torch.Tensor | Sequence[int], name: str = "slots") -> None:
        """Raise ValueError unless every slot (all within the pool) lies in a page this allocator handed out."""
        t = slots if isinstance(slots, torch.Tensor) and slots.device.type == "cpu" else \
            torch.as_tensor(slots, dtype=torch.int64).cpu()
        pages = t if self.page_size == 1 else torch.div(t, self.page_size, rounding_mode="floor")
        ok = self._in_use_mask[pages]
        if not bool(ok.all()):
            page = int(pages[~ok].min())
            raise ValueError(f"{name} holds slot(s) of page {page}, which this allocator has not handed out "
                             "(a free slot, or another pool's)")

    def pages_in_use(self) -> set[int]:
        """Pages handed out and not yet freed (what the leak checks compare against)."""
        return set(self._in_use)

    def __repr__(self) -> str:
        return (f"TokenToKVPoolAllocator(size={self.size}, page_size={self.page_size}, "
                f"available={self.available_size()})")
