"""``ServerArgs``: every argument of the engine in one dataclass, checked once (``__post_init__``).

Mirrors ``sglang/srt/server_args.py``, whose names it keeps (``page_size``, ``max_total_tokens``,
``max_running_requests``, ``disable_radix_cache``, ``chunked_prefill_size``, ``max_prefill_tokens``,
``schedule_policy``, ``random_seed``, ``disable_overlap_schedule``). Differences, on purpose: the
defaults are sized for a laptop and the tiny model; ``disable_overlap_schedule`` is True (the engine
is first a thing to step through, notebook 08); ``chunked_prefill_size=None`` means no chunking
(SGLang: -1; its None sizes the chunk from GPU memory, ``_handle_gpu_memory_settings``). The rest are radixlab's switches: ``prefix_cache`` ("radix", or "hash": vLLM's
block-hash cache, notebook 09), ``device_backend`` (notebook 08), ``hold_back_deprioritized``
(``schedule_policy.py``), ``keep_logits`` and two unsafe switches for notebook 07's demonstrations.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..utils.checks import check_int
from .io_struct import INT64_MAX
from .schedule_policy import POLICIES

PREFIX_CACHES = ("radix", "hash")
HASH_BLOCK_SIZE = 16  # vLLM's default block size


def _int(value: Any, name: str, minimum: int, maximum: int | None = None) -> int:
    """``check_int``, with every bad value a ``ValueError`` (the engine's constructor contract)."""
    try:
        return check_int(value, name, minimum, maximum)
    except TypeError as exc:
        raise ValueError(str(exc)) from None


@dataclass
class ServerArgs:
    """The engine's configuration; ``Engine(model, **kwargs)`` builds one from its keyword arguments."""

    page_size: int = 1
    max_total_tokens: int = 4096  # KV slots; rounded down to whole pages
    max_running_requests: int = 32  # request rows
    disable_radix_cache: bool = False
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    prefix_cache: str = "radix"
    random_seed: int = 0
    keep_logits: bool = False
    unsafe_ignore_lora_namespace: bool = False
    unsafe_share_partial_pages: bool = False
    disable_overlap_schedule: bool = True
    device_backend: str | None = None
    hold_back_deprioritized: bool = True

    def __post_init__(self) -> None:
        self.page_size = _int(self.page_size, "page_size", 1)
        given = _int(self.max_total_tokens, "max_total_tokens", 1)
        self.max_total_tokens = given // self.page_size * self.page_size  # whole pages, as SGLang
        if self.max_total_tokens == 0:
            raise ValueError(f"max_total_tokens must hold at least one page of {self.page_size} tokens, got {given}")
        self.max_running_requests = _int(self.max_running_requests, "max_running_requests", 1)
        if self.chunked_prefill_size is not None:
            self.chunked_prefill_size = _int(self.chunked_prefill_size, "chunked_prefill_size", 1)
            if self.chunked_prefill_size % self.page_size:
                raise ValueError(f"chunked_prefill_size must be a multiple of page_size={self.page_size}, "
                                 f"got {self.chunked_prefill_size}")
        self.max_prefill_tokens = _int(self.max_prefill_tokens, "max_prefill_tokens", 1)
        for f in fields(self):
            if f.type == "bool" and not isinstance(getattr(self, f.name), bool):
                raise ValueError(f"{f.name} must be a bool, got {getattr(self, f.name)!r}")
        if self.schedule_policy not in POLICIES:
            raise ValueError(f"schedule_policy must be one of {sorted(POLICIES)}, got {self.schedule_policy!r}")
        if self.prefix_cache not in PREFIX_CACHES:
            raise ValueError(f"prefix_cache must be one of {', '.join(PREFIX_CACHES)}, got {self.prefix_cache!r}")
        if self.prefix_cache == "hash" and HASH_BLOCK_SIZE % self.page_size:
            raise ValueError(f"prefix_cache='hash' caches blocks of {HASH_BLOCK_SIZE} tokens: page_size must "
                             f"divide {HASH_BLOCK_SIZE}, got {self.page_size}")
        self.random_seed = _int(self.random_seed, "random_seed", 0, INT64_MAX)
