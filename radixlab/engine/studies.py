"""The measured experiments of notebook 07_kv_memory_pool, as functions (tested in tests/test_engine_studies.py).

* ``dense_greedy`` / ``logit_error``: the reference every engine output is compared with.
* ``adapter_namespace_demo``: the same prompt under adapters A and B, with and without the adapter
  in the namespace.
* ``half_page_demo``: two requests sharing a half-filled page (the unsafe switch) vs page-aligned.
* ``page_size_tradeoff``: fragmentation, page-table size and reusable prefix tokens vs page size.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from .engine import Engine


def dense_greedy(model: Any, prompt: Sequence[int], max_new_tokens: int, lora_path: str | None = None) -> list[int]:
    """Greedy decoding with ``forward_dense`` (no pool, no cache): the reference output."""
    ids = list(prompt)
    for _ in range(max_new_tokens):
        ids.append(int(model.forward_dense(torch.tensor(ids), lora_path=lora_path)[-1].argmax()))
    return ids[len(prompt):]


def logit_error(model: Any, prompt: Sequence[int], out: dict, lora_path: str | None = None) -> float:
    """Largest |engine logit − dense logit| over the output tokens (``out`` from an engine built with
    ``keep_logits=True``); the dense run feeds the engine's own tokens, so every row compares the
    same prefix."""
    ids = out["output_ids"]
    if not ids:
        return 0.0
    dense = model.forward_dense(torch.tensor(list(prompt) + ids[:-1]), lora_path=lora_path).float().cpu()
    got = torch.stack(out["meta_info"]["output_logits"])
    return float((got - dense[len(prompt) - 1:]).abs().max())


def adapter_namespace_demo(model: Any, prompt: Sequence[int], max_new_tokens: int = 8) -> list[dict]:
    """Serve ``prompt`` under adapter A, then B, in one engine; once with the adapter in the
    namespace (SGLang), once without (``unsafe_ignore_lora_namespace``). One row per B run."""
    rows = []
    for unsafe in (False, True):
        engine = Engine(model, keep_logits=True, unsafe_ignore_lora_namespace=unsafe)
        engine.generate(list(prompt), {"max_new_tokens": max_new_tokens}, lora_path="A")
        b = engine.generate(list(prompt), {"max_new_tokens": max_new_tokens}, lora_path="B")
        rows.append({"adapter_in_namespace": not unsafe, "cached_tokens": b["meta_info"]["cached_tokens"],
                     "output_ids": b["output_ids"], "reference_ids": dense_greedy(model, prompt, max_new_tokens, "B"),
                     "logit_error": logit_error(model, prompt, b, "B"),
                     "namespaces": sorted({n.key.extra_key for n in engine.tree_cache.nodes()}, key=repr)})
    return rows


def half_page_demo(model: Any, a: Sequence[int], b: Sequence[int], page_size: int = 4,
                   max_new_tokens: int = 4) -> list[dict]:
    """A runs; B shares part of A's half-filled last page and arrives one batch later (while A
    decodes). Page-aligned sharing vs the unsafe switch: each request's error against its dense
    reference, B's cached tokens, and both rows (slot indices)."""
    rows = []
    for unsafe in (False, True):
        engine = Engine(model, page_size=page_size, max_prefill_tokens=len(a), keep_logits=True,
                        unsafe_share_partial_pages=unsafe)
        ra, rb = engine.add_requests([list(a), list(b)], {"max_new_tokens": max_new_tokens})
        table = {}
        while engine.step() is not None:
            for name, r in (("A", ra), ("B", rb)):
                if r.req_pool_idx is not None:
                    table[name] = engine.req_to_token_pool.req_to_token[r.req_pool_idx, :r.seq_len].tolist()
        out_a, out_b = engine.result(ra), engine.result(rb)
        rows.append({"unsafe": unsafe, "b_cached_tokens": out_b["meta_info"]["cached_tokens"],
                     "rows": table, "error_a": logit_error(model, a, out_a), "error_b": logit_error(model, b, out_b),
                     "a_ok": out_a["output_ids"] == dense_greedy(model, a, max_new_tokens),
                     "b_ok": out_b["output_ids"] == dense_greedy(model, b, max_new_tokens)})
    return rows


def page_size_tradeoff(model: Any, prompts: Sequence[Sequence[int]], page_sizes: Sequence[int],
                       max_new_tokens: int = 8, progress: Any = None) -> list[dict]:
    """Serve the same prompts (the first alone, the rest together) at each page size and measure,
    from the live pools after every step:

    * ``fragmentation``: slots allocated but holding no token (the unused tail of last pages), at its peak;
    * ``page_table_entries``: pages listed by the live requests' page tables (``ceil(seq_len / page_size)``
      each — what a paged attention kernel reads), at its peak;
    * ``reusable_prefix_tokens``: prompt tokens taken from the tree (``cached_tokens``, page-aligned).
    """
    rows = []
    longest = max(len(p) for p in prompts) + max_new_tokens
    for page_size in (progress(page_sizes) if progress else page_sizes):
        size = -(-(len(prompts) + 1) * (longest + page_size) // page_size) * page_size
        engine = Engine(model, page_size=page_size, max_total_tokens=size, max_running_requests=len(prompts))
        cached = engine.generate(list(prompts[0]), {"max_new_tokens": max_new_tokens})["meta_info"]["cached_tokens"]
        reqs = engine.add_requests([list(p) for p in prompts[1:]], {"max_new_tokens": max_new_tokens})
        frag = entries = 0
        alloc, tree = engine.token_to_kv_pool_allocator, engine.tree_cache
        while engine.step() is not None:
            live = [r for r in reqs if r.req_pool_idx is not None]
            stored = tree.total_size() + sum(r.seq_len - r.cache_protected_len for r in live)
            frag = max(frag, (alloc.size - alloc.available_size()) - stored)
            entries = max(entries, sum(-(-r.seq_len // page_size) for r in live))
        cached += sum(r.cached_tokens for r in reqs)
        rows.append({"page_size": page_size, "fragmentation": frag, "page_table_entries": entries,
                     "reusable_prefix_tokens": cached})
    return rows
