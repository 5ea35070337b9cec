"""Instructor answer of exercise 07.2 (never imported by a notebook: the student edition cannot see it).

The grader computes 07.2's expected values from it, in its own process.
"""

from __future__ import annotations

import torch


def reference_write_new_kv(req_to_token_pool, allocator, kv_pool, batch, new_kv):
    """Slots for each request's new tokens (continuing its last page), into its row after the prefix;
    their concatenation is out_cache_loc, through which every layer stores the new K/V."""
    locs = []
    for row, prefix_len, extend_len in batch:
        last_loc = int(req_to_token_pool.req_to_token[row, prefix_len - 1]) if prefix_len else -1
        slots = allocator.alloc_extend(prefix_len, last_loc, extend_len)
        req_to_token_pool.write(row, prefix_len, slots)
        locs.append(slots)
    out_cache_loc = torch.cat(locs)
    for layer, (k, v) in enumerate(new_kv):
        kv_pool.set_kv_buffer(layer, out_cache_loc, k, v)
    return out_cache_loc
