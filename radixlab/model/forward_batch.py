"""``ForwardBatch``: what one model step computes — SGLang's names, plain tensors (notebook 07).

An EXTEND step runs the new tokens of one or more requests (a whole prompt, or the part past a
cached prefix); a DECODE step runs exactly one new token per request. All new tokens of the batch
are concatenated into one 1-D ``input_ids``; request ``i`` owns ``extend_seq_lens[i]`` of them, at
positions ``extend_prefix_lens[i] ..  seq_lens[i] - 1``, and they go into the KV slots
``out_cache_loc``. Mirrors ``sglang/srt/model_executor/forward_batch_info.py``.

A difference from SGLang, on purpose: SGLang leaves ``extend_prefix_lens``/``extend_seq_lens``
``None`` in DECODE; here they are always filled (prefix ``seq_len - 1``, one new token), so one
attention code path serves both modes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, auto
from typing import Sequence

import torch


class ForwardMode(IntEnum):
    EXTEND = auto()  # prefill: any number of new tokens per request, after a (possibly empty) cached prefix
    DECODE = auto()  # one new token per request

    def is_extend(self) -> bool:
        return self == ForwardMode.EXTEND

    def is_decode(self) -> bool:
        return self == ForwardMode.DECODE


@dataclass
class ForwardBatch:
    """One model step. Index tensors are int64 on the model's device; lengths are per request.

    ``lora_ids`` (optional) names each request's adapter (``None`` = the base model); SGLang's
    field has the same name. ``ForwardBatch.build`` fills the derived fields from per-request lists.
    """

    forward_mode: ForwardMode
    batch_size: int
    input_ids: torch.Tensor           # [num_new_tokens]
    positions: torch.Tensor           # [num_new_tokens]: position of each new token in its request
    req_pool_indices: torch.Tensor    # [batch_size]: each request's row in ReqToTokenPool
    seq_lens: torch.Tensor            # [batch_size]: tokens in the request after this step (prefix + new)
    extend_prefix_lens: torch.Tensor  # [batch_size]: tokens already in the KV pool
    extend_seq_lens: torch.Tensor     # [batch_size]: new tokens this step
    out_cache_loc: torch.Tensor       # [num_new_tokens]: the KV slot each new token's K/V goes to
    lora_ids: list[str | None] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.forward_mode, ForwardMode):
            raise ValueError(f"forward_mode must be a ForwardMode, got {self.forward_mode!r}")
        b = self.batch_size
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise ValueError(f"batch_size must be a positive int, got {b!r}")
        for name in ("input_ids", "positions", "req_pool_indices", "seq_lens", "extend_prefix_lens",
                     "extend_seq_lens", "out_cache_loc"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.dtype not in (torch.int64, torch.int32):
                raise ValueError(f"{name} must be a 1-D integer tensor, got "
                                 f"{type(t).__name__ if not isinstance(t, torch.Tensor) else (t.dtype, tuple(t.shape))}")
        for name in ("req_pool_indices", "seq_lens", "extend_prefix_lens", "extend_seq_lens"):
            if len(getattr(self, name)) != b:
                raise ValueError(f"{name} must have batch_size={b} entries, got {len(getattr(self, name))}")
        n = len(self.input_ids)
        for name in ("positions", "out_cache_loc"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} must have one entry per new token ({n}), got {len(getattr(self, name))}")
        ext, pre, seq = self.extend_seq_lens.tolist(), self.extend_prefix_lens.tolist(), self.seq_lens.tolist()
        if min(ext) < 1 or min(pre) < 0:
            raise ValueError(f"every request needs >= 1 new token and a prefix >= 0; got extend_seq_lens={ext}, "
                             f"extend_prefix_lens={pre}")
        if sum(ext) != n:
            raise ValueError(f"extend_seq_lens sum to {sum(ext)} but input_ids holds {n} tokens")
        if [p + e for p, e in zip(pre, ext)] != seq:
            raise ValueError(f"seq_lens must equal extend_prefix_lens + extend_seq_lens, got seq_lens={seq}, "
                             f"extend_prefix_lens={pre}, extend_seq_lens={ext}")
        want_pos = [p + j for p, e in zip(pre, ext) for j in range(e)]
        if self.positions.tolist() != want_pos:
            raise ValueError(f"positions must run extend_prefix_lens[i] .. seq_lens[i] - 1 for each request, "
                             f"expected {want_pos[:16]}, got {self.positions.tolist()[:16]}")
        if self.forward_mode.is_decode() and any(e != 1 for e in ext):
            raise ValueError(f"DECODE runs exactly one new token per request, got extend_seq_lens={ext}")
        if self.lora_ids is not None and len(self.lora_ids) != b:
            raise ValueError(f"lora_ids must have batch_size={b} entries, got {len(self.lora_ids)}")

    @classmethod
    def build(cls, forward_mode: ForwardMode, new_token_ids: Sequence[Sequence[int]],
              req_pool_indices: Sequence[int], prefix_lens: Sequence[int], out_cache_loc: torch.Tensor | Sequence[int],
              lora_ids: Sequence[str | None] | None = None, device: str | torch.device = "cpu") -> "ForwardBatch":
        """A batch from per-request lists: request ``i`` runs ``new_token_ids[i]`` after ``prefix_lens[i]``
        tokens already in the pool; ``out_cache_loc`` holds the slots of all new tokens, request by request."""
        if not isinstance(forward_mode, ForwardMode):
            raise ValueError(f"forward_mode must be a ForwardMode, got {forward_mode!r}")
        if not (len(new_token_ids) == len(req_pool_indices) == len(prefix_lens)):
            raise ValueError(f"new_token_ids, req_pool_indices and prefix_lens must have one entry per request, got "
                             f"{len(new_token_ids)}, {len(req_pool_indices)}, {len(prefix_lens)}")
        ext = [len(t) for t in new_token_ids]
        flat = [int(x) for t in new_token_ids for x in t]
        positions = [p + j for p, e in zip(prefix_lens, ext) for j in range(e)]

        def tensor(values) -> torch.Tensor:
            if isinstance(values, torch.Tensor):
                return values.to(device=device, dtype=torch.int64)
            return torch.tensor([int(v) for v in values], dtype=torch.int64, device=device)
        return cls(forward_mode=forward_mode, batch_size=len(ext), input_ids=tensor(flat), positions=tensor(positions),
                   req_pool_indices=tensor(req_pool_indices), seq_lens=tensor([p + e for p, e in zip(prefix_lens, ext)]),
                   extend_prefix_lens=tensor(prefix_lens), extend_seq_lens=tensor(ext),
                   out_cache_loc=tensor(out_cache_loc), lora_ids=None if lora_ids is None else list(lora_ids))

    @property
    def seq_lens_sum(self) -> int:
        """Total tokens the batch attends over (SGLang keeps it as a field)."""
        return int(self.seq_lens.sum())

    def last_token_indices(self) -> torch.Tensor:
        """Index into the batch's new tokens (and into ``model.forward``'s logits) of each request's last token."""
        return torch.cumsum(self.extend_seq_lens, 0) - 1
