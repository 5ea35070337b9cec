"""Shared helpers for the engine tests: devices, prompt sets, the dense reference, leak checks."""

from __future__ import annotations

import random

import torch

from radixlab.mem_cache import HashBlockCache, RadixCache

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def shared_prefix_prompts(seed: int, n: int = 10, vocab: int = 256, systems_seed: int = 0) -> list[list[int]]:
    """Random token prompts that share prefixes: a few system prefixes (the same for every ``seed``
    with one ``systems_seed``), random suffixes, some exact duplicates and some prompts that are
    prefixes of others."""
    srng = random.Random(systems_seed)
    systems = [[srng.randrange(vocab) for _ in range(srng.randint(10, 60))] for _ in range(3)]
    rng = random.Random(seed)
    prompts: list[list[int]] = []
    for _ in range(n):
        kind = rng.random()
        if prompts and kind < 0.15:
            prompts.append(list(rng.choice(prompts)))  # duplicate
        elif prompts and kind < 0.3:
            p = rng.choice(prompts)
            prompts.append(p[: rng.randint(1, len(p))])  # prefix of an earlier prompt
        else:
            sys_ = rng.choice(systems)
            prompts.append(sys_[: rng.randint(len(sys_) // 2, len(sys_))]
                           + [rng.randrange(vocab) for _ in range(rng.randint(1, 25))])
    return prompts


def check_against_dense(model, prompt: list[int], out: dict, lora_path: str | None = None,
                        atol: float = 1e-4) -> float:
    """Assert the engine's output is greedy dense decoding: every output token is the argmax of
    ``forward_dense`` on the same prefix, and the engine's logits match within ``atol``.
    Returns the smallest top-1/top-2 gap seen (how far from a tie the tokens were)."""
    ids = out["output_ids"]
    if not ids:
        return float("inf")
    full = torch.tensor(prompt + ids[:-1])
    dense = model.forward_dense(full, lora_path=lora_path).float().cpu()
    rows = dense[len(prompt) - 1:]
    assert rows.argmax(-1).tolist() == ids, "engine tokens differ from greedy forward_dense decoding"
    got = torch.stack(out["meta_info"]["output_logits"])
    err = (got - rows).abs().max().item()
    assert err <= atol, f"engine logits differ from forward_dense by {err:.2e} > {atol}"
    top2 = rows.topk(2, dim=-1).values
    return float((top2[:, 0] - top2[:, 1]).min())


def assert_no_leak(engine) -> None:
    """Between generate calls: no row taken, no lock held, and every allocated page is a tree page."""
    pool, alloc, tree = engine.req_to_token_pool, engine.token_to_kv_pool_allocator, engine.tree_cache
    assert pool.available_size() == pool.size, "a request row was not given back"
    assert tree.protected_size() == 0, "a lock was left on the tree"
    tree.check_invariants()
    if isinstance(tree, RadixCache):
        tree_pages = {int(s) // alloc.page_size for n in tree.nodes() for s in n.value.tolist()}
    elif isinstance(tree, HashBlockCache):
        tree_pages = {int(s) // alloc.page_size for b in tree.table.values() for s in b.value.tolist()}
    else:  # ChunkCache keeps nothing
        tree_pages = set()
    assert alloc.pages_in_use() == tree_pages, "allocated pages differ from the pages the tree holds"


def one_thread():
    """Generator for an autouse fixture: the tiny model's ops are far too small for intra-op
    threads, and on a loaded machine their spin-waits make the tests ~7x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
