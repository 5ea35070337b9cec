"""Instructor answer of exercise 07.1 (never imported by a notebook: the student edition cannot see it).

The grader computes 07.1's expected values from it, in its own process.
"""

from __future__ import annotations

import torch


def reference_gather_kv(req_to_token: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor,
                        req_pool_idx: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Read the request's row (position → slot, prefix included), then those slots' rows of the buffers."""
    slots = req_to_token[req_pool_idx, :seq_len]
    return k_buffer[slots], v_buffer[slots]
