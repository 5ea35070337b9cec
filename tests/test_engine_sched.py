"""The engine's scheduling switches: every policy and every prefix cache gives the same greedy tokens;
the in-batch prefix check; the LPM fallback; the hash cache inside the engine (vLLM's way)."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlab.engine import Engine
from radixlab.engine.schedule_batch import Req
from radixlab.engine.schedule_policy import LPM_FALLBACK_QUEUE_LEN
from radixlab.mem_cache import HashBlockCache, ReqToTokenPool, Request, TokenToKVPoolAllocator, admit, extend, release
from radixlab.model import load_model
from radixlab.sim.workloads import generated_shared_prefix


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return load_model("tiny")


@pytest.fixture(scope="module")
def prompts():
    trace = generated_shared_prefix(num_groups=2, prompts_per_group=3, system_prompt_len=40, question_len=6,
                                    output_len=3, vocab=256, ordered=True, seed=1)
    return [list(r.prompt_ids) for r in trace]


def run(model, prompts, **kw):
    engine = Engine(model, max_total_tokens=kw.pop("max_total_tokens", 160), max_running_requests=kw.pop("max_running_requests", 2), **kw)
    out = engine.generate(prompts, {"max_new_tokens": 3})
    alloc = engine.token_to_kv_pool_allocator
    assert alloc.size - alloc.available_size() == engine.tree_cache.total_size()  # nothing leaked
    if hasattr(engine.tree_cache, "check_invariants"):
        engine.tree_cache.check_invariants()
    return engine, [o["output_ids"] for o in out], out


CONFIGS = [dict(disable_radix_cache=True), dict(schedule_policy="fcfs"), dict(schedule_policy="lpm"),
           dict(schedule_policy="dfs-weight"), dict(schedule_policy="lof"), dict(schedule_policy="random"),
           dict(prefix_cache="hash"), dict(prefix_cache="hash", page_size=4, schedule_policy="lpm"),
           dict(page_size=16, schedule_policy="dfs-weight")]


def test_every_policy_and_prefix_cache_gives_the_same_greedy_tokens(model, prompts):
    _, want, _ = run(model, prompts, disable_radix_cache=True)
    for kw in CONFIGS[1:]:
        engine, got, out = run(model, prompts, **kw)
        assert got == want, kw
        if kw.get("prefix_cache") == "hash":
            assert all(o["meta_info"]["cached_tokens"] % 16 == 0 for o in out)
            assert sum(o["meta_info"]["cached_tokens"] for o in out) > 0


def test_policies_and_hash_cache_under_the_overlap_loop(model, prompts):
    _, want, _ = run(model, prompts, disable_radix_cache=True)
    for kw in (dict(schedule_policy="lpm"), dict(schedule_policy="dfs-weight"), dict(prefix_cache="hash")):
        _, got, _ = run(model, prompts, disable_overlap_schedule=False, **kw)
        assert got == want, kw


def test_unknown_policy_or_prefix_cache_is_a_value_error(model):
    with pytest.raises(ValueError, match="schedule_policy"):
        Engine(model, schedule_policy="sjf")
    with pytest.raises(ValueError, match="prefix_cache"):
        Engine(model, prefix_cache="lru")
    with pytest.raises(ValueError, match="page_size"):
        Engine(model, prefix_cache="hash", page_size=3)


def test_in_batch_check_computes_a_shared_uncached_prefix_once(model):
    shared = list(range(10, 50))  # 40 tokens, nothing cached yet
    batch = [shared + [1, 2], shared + [3, 4], shared + [5, 6]]
    fcfs, toks_f, out_f = run(model, batch, schedule_policy="fcfs", max_running_requests=3)
    lpm, toks_l, out_l = run(model, batch, schedule_policy="lpm", max_running_requests=3)
    assert toks_f == toks_l
    assert fcfs.stats.prefill_tokens == 3 * 42  # all three in one batch: the prefix three times
    assert lpm.stats.prefill_tokens == 42 + 2 + 2 and lpm.stats.held_back >= 2
    assert [o["meta_info"]["cached_tokens"] for o in out_l] == [0, 40, 40]
    sglang, toks_s, out_s = run(model, batch, schedule_policy="lpm", max_running_requests=3,
                                hold_back_deprioritized=False)
    assert toks_s == toks_f  # SGLang's way: the deprioritized only sort last; with room, all three run now
    assert sglang.stats.prefill_tokens == 3 * 42 and sglang.stats.held_back == 0
    assert [o["meta_info"]["cached_tokens"] for o in out_s] == [0, 0, 0]
    # With two rows, sorting last is what makes the difference: the unrelated request takes the second
    # row, the deprioritized one waits a batch and hits the shared prefix (FCFS would run it at once).
    mixed = [shared + [1, 2], shared + [3, 4], list(range(200, 242))]
    for kw, want in ((dict(schedule_policy="lpm", hold_back_deprioritized=False), [0, 40, 0]),
                     (dict(schedule_policy="fcfs"), [0, 0, 0])):
        _, _, out_m = run(model, mixed, max_running_requests=2, **kw)
        assert [o["meta_info"]["cached_tokens"] for o in out_m] == want, kw
    with pytest.raises(ValueError, match="hold_back_deprioritized must be a bool"):
        Engine(model, schedule_policy="lpm", hold_back_deprioritized="no")
    lpm.scheduler.policy.in_batch_check = False
    lpm.flush_cache()
    lpm.stats.reset()
    lpm.generate(batch, {"max_new_tokens": 3})
    assert lpm.stats.prefill_tokens == 3 * 42


def test_engine_lpm_falls_back_to_fcfs_over_128_waiting(model):
    engine = Engine(model, max_total_tokens=512, schedule_policy="lpm")
    engine.generate([[7] * 20 + [1]], {"max_new_tokens": 1})  # something to hit
    policy = engine.scheduler.policy
    for n, active in ((LPM_FALLBACK_QUEUE_LEN, "lpm"), (LPM_FALLBACK_QUEUE_LEN + 1, "fcfs")):
        queue = [Req(rid=f"r{i}", origin_input_ids=[100 + i % 50, i % 7, 3]) for i in range(n - 1)]
        queue.append(Req(rid="hit", origin_input_ids=[7] * 20 + [2]))
        policy.calc_priority(queue)
        assert policy.decision.active_policy == active
        assert (queue[0].rid == "hit") == (active == "lpm")


def test_hash_cache_hashes_each_block_of_a_request_once(model):
    engine, _, _ = run(model, [list(range(1, 70))], prefix_cache="hash", max_total_tokens=256)
    # 69 prompt + 3 output tokens: 4 full blocks, hashed once each although the request was matched
    # at admission, cached after prefill and inserted at the end
    assert engine.tree_cache.hash_computations == 4
    req = Req(rid="x", origin_input_ids=list(range(40)))
    cache = HashBlockCache(16)
    cache.match_prefix(req.radix_key(), req)  # the request keeps the hashes it computed
    assert len(req.block_hashes) == 2 and cache.hash_computations == 2
    cache.match_prefix(req.radix_key(), req)
    assert cache.hash_computations == 2


# -- HashBlockCache on its own, through notebook 05's request lifecycle -------------------------

BS = 4


def brute_force_hit(history: list[list[int]], prompt: list[int]) -> int:
    """Whole blocks of prompt[:-1] that are a prefix of some earlier request's whole blocks."""
    best = 0
    usable = prompt[:-1]
    for seq in history:
        full = seq[: len(seq) // BS * BS]
        k = 0
        while (k + 1) * BS <= min(len(usable), len(full)) and usable[: (k + 1) * BS] == full[: (k + 1) * BS]:
            k += 1
        best = max(best, k * BS)
    return best


def slots_accounted(cache: HashBlockCache, alloc: TokenToKVPoolAllocator) -> None:
    held = [int(s) for b in cache.table.values() for s in b.value]
    assert len(held) == len(set(held)), "a slot is held by two blocks"
    assert {s // alloc.page_size for s in held} == alloc.pages_in_use(), "slots leaked or freed while cached"


requests = st.lists(st.tuples(st.lists(st.integers(1, 2), min_size=1, max_size=14), st.integers(0, 5)),
                    min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(requests, st.sampled_from([None, "ns"]))
def test_hash_block_cache_hits_match_brute_force_without_eviction(reqs, ns):
    alloc = TokenToKVPoolAllocator(4096, 1)
    cache = HashBlockCache(BS, token_to_kv_pool_allocator=alloc, req_to_token_pool=ReqToTokenPool(2, 64))
    history: list[list[int]] = []
    for i, (prompt, n_out) in enumerate(reqs):
        req = Request(str(i), prompt, [9] * n_out, extra_key=ns)
        assert admit(req, cache) == brute_force_hit(history, prompt)
        assert extend(req, cache, len(req.all_ids) - req.seq_len)
        release(req, cache)
        history.append(prompt + [9] * n_out)
        cache.check_invariants()
        slots_accounted(cache, alloc)


@settings(max_examples=60, deadline=None)
@given(requests)
def test_hash_block_cache_under_eviction_keeps_every_slot_accounted(reqs):
    alloc = TokenToKVPoolAllocator(24, 1)  # a small pool: requests of up to 19 tokens evict all the time
    cache = HashBlockCache(BS, token_to_kv_pool_allocator=alloc, req_to_token_pool=ReqToTokenPool(2, 64))
    for i, (prompt, n_out) in enumerate(reqs):
        req = Request(str(i), prompt, [9] * n_out)
        hit = admit(req, cache)
        assert hit % BS == 0
        assert extend(req, cache, len(req.all_ids) - req.seq_len)
        release(req, cache)
        cache.check_invariants()
        slots_accounted(cache, alloc)
    total = cache.total_size()
    assert cache.evictable_size() == total and cache.evict(10**6) == total  # nothing is locked any more
    assert alloc.available_size() == 24 and not cache.table


def test_an_evicted_parent_re_links_its_orphan_child():
    alloc = TokenToKVPoolAllocator(64, 1)
    cache = HashBlockCache(BS, token_to_kv_pool_allocator=alloc, req_to_token_pool=ReqToTokenPool(2, 64))
    seq = [1, 2, 3, 4, 5, 6, 7, 8, 0]
    req = Request("a", seq)
    admit(req, cache), extend(req, cache), release(req, cache)
    head = cache.match_prefix(seq[:4]).last_node
    del cache.free_queue[head]
    cache.free_queue = {head: None, **cache.free_queue}  # evict block 0 first, leaving block 1 orphaned
    assert cache.evict(4) == 4 and len(cache.table) == 1
    assert len(cache.match_prefix(seq)) == 0  # unreachable: its parent is gone
    req = Request("b", seq)
    admit(req, cache), extend(req, cache), release(req, cache)
    assert len(cache.table) == 2 and len(cache.match_prefix(seq)) == 8  # the orphan is reused
    cache.check_invariants()
    slots_accounted(cache, alloc)


@pytest.mark.parametrize("overlap", [False, True])
def test_hash_cache_shares_blocks_within_a_batch_as_vllm_does(model, overlap):
    """vLLM caches full blocks when it allocates them: a request later in the same batch hits them (their
    KV is written in the same forward before attention reads it). SGLang's radix cache adopts a prefill's
    KV after it ran: there the second request computes the shared prefix too."""
    shared = list(range(10, 50))  # 40 tokens, nothing cached yet: two full blocks of 16, and 8 more
    batch = [shared + [1, 2], shared + [3, 4]]
    kw = dict(max_running_requests=2, disable_overlap_schedule=not overlap)
    _, want, _ = run(model, batch, disable_radix_cache=True, **kw)
    hashed, got, out = run(model, batch, prefix_cache="hash", **kw)
    assert got == want  # the second request's attention read KV written in the same forward
    assert [o["meta_info"]["cached_tokens"] for o in out] == [0, 32]
    assert hashed.stats.prefill_tokens == 42 + 10 and hashed.stats.extend_batches == 1
    radix, got_r, out_r = run(model, batch, **kw)
    assert got_r == want and [o["meta_info"]["cached_tokens"] for o in out_r] == [0, 0]
    assert radix.stats.prefill_tokens == 2 * 42


def test_hash_cache_chunked_prefill_caches_each_chunk_at_allocation(model):
    """The last chunk of the first request and the second request run in one batch: the block that
    chunk completes is cached at its allocation, so the second request hits it too (64, not 48)."""
    shared = list(range(10, 74))  # 64 tokens: four blocks
    batch = [shared + [1, 2, 3, 4], shared + [5, 6, 7, 8]]
    _, want, _ = run(model, batch, disable_radix_cache=True, max_running_requests=2)
    for overlap in (False, True):
        eng, got, out = run(model, batch, prefix_cache="hash", max_running_requests=2, chunked_prefill_size=48,
                            disable_overlap_schedule=not overlap)
        assert got == want and [o["meta_info"]["cached_tokens"] for o in out] == [0, 64]


def test_hash_cache_admission_counts_slots_allocated_at_admission_once(model):
    """Slots taken at admission leave the adder's budget once: four 32-slot requests in a 96-slot pool run
    three then one (not fewer per batch: counted twice; not a pool exhausted mid-batch: not counted)."""
    prompts = [list(range(s, s + 30)) for s in (10, 50, 90, 130)]
    engine = Engine(model, prefix_cache="hash", max_total_tokens=96, max_running_requests=4)
    engine.generate(prompts, {"max_new_tokens": 2})
    assert engine.stats.extend_batches == 2


def test_hash_cache_random_workloads_match_no_cache_and_leak_nothing(model):
    """Shared, identical and whole-block prompts, pages, chunks, tight pools, both loops: same tokens as
    no cache, every slot the cache's or free, no slot written twice in one forward."""
    rng = random.Random(7)
    for _ in range(25):
        page = rng.choice([1, 2, 4, 8, 16])
        base = [rng.randrange(256) for _ in range(64)]
        prompts = []
        for _ in range(rng.randint(2, 7)):
            kind = rng.random()
            if kind < 0.4:
                p = base[:rng.choice([16, 32, 48, 64, 17, 33, 20])]
            elif kind < 0.7:
                p = base[:rng.choice([16, 32, 48])] + [rng.randrange(256) for _ in range(rng.choice([1, 16, 7]))]
            else:
                p = [rng.randrange(256) for _ in range(rng.randint(1, 40))]
            prompts.append(p)
        chunk = rng.choice([None, 16, 32])
        kw = dict(page_size=page, max_total_tokens=rng.choice([96, 128, 256]), max_running_requests=rng.choice([2, 3, 4]),
                  chunked_prefill_size=chunk,  # 16 or 32: a multiple of every page size drawn
                  schedule_policy=rng.choice(["fcfs", "lpm"]), disable_overlap_schedule=rng.random() < 0.6)
        ref = Engine(model, page_size=page, max_total_tokens=512, max_running_requests=8, disable_radix_cache=True)
        want = [o["output_ids"] for o in ref.generate(prompts, {"max_new_tokens": 2})]
        engine = Engine(model, prefix_cache="hash", **kw)
        if kw["disable_overlap_schedule"]:
            real = engine.model_runner.forward

            def once_each(batch, real=real):
                loc = batch.out_cache_loc.tolist()
                assert len(set(loc)) == len(loc), "a slot written twice in one forward"
                return real(batch)
            engine.model_runner.forward = once_each
        for _ in range(2):  # the second time, much of it is cached
            assert [o["output_ids"] for o in engine.generate(prompts, {"max_new_tokens": 2})] == want, kw
            alloc = engine.token_to_kv_pool_allocator
            assert alloc.size - alloc.available_size() == engine.tree_cache.total_size(), kw
            engine.tree_cache.check_invariants()


def test_an_error_mid_run_drops_blocks_cached_before_they_were_computed(model, monkeypatch):
    """Blocks cached at allocation hold KV only once the forward ran: after an error the cache is emptied."""
    engine = Engine(model, max_total_tokens=160, max_running_requests=2, prefix_cache="hash")
    real = engine.model_runner.forward

    def broken(batch):
        raise RuntimeError("device lost")
    monkeypatch.setattr(engine.model_runner, "forward", broken)
    prompt = list(range(10, 60))
    with pytest.raises(RuntimeError, match="device lost"):
        engine.generate([prompt], {"max_new_tokens": 2})
    assert engine.tree_cache.total_size() == 0  # the block registered at admission went with the error
    assert engine.token_to_kv_pool_allocator.available_size() == engine.token_to_kv_pool_allocator.size
    monkeypatch.setattr(engine.model_runner, "forward", real)
    out = engine.generate([prompt], {"max_new_tokens": 2})
    assert out[0]["meta_info"]["cached_tokens"] == 0


def test_hash_cache_identical_prompts_in_one_batch_keep_their_own_slots_until_computed(model):
    """Two identical prompts of whole blocks: the block holding the last token cannot be a hit (its
    logits are computed), so both compute it; the second's copy is freed only after the forward."""
    prompt = list(range(10, 42))  # exactly two blocks
    batch = [prompt, list(prompt), list(range(100, 140))]
    _, want, _ = run(model, batch, disable_radix_cache=True, max_running_requests=3)
    for overlap in (False, True):
        eng, got, out = run(model, batch, prefix_cache="hash", max_running_requests=3,
                            disable_overlap_schedule=not overlap)
        assert got == want and [o["meta_info"]["cached_tokens"] for o in out] == [0, 16, 0]


@pytest.mark.parametrize("cache", ["radix", "hash"])
@pytest.mark.parametrize("overlap", [False, True])
def test_an_error_while_a_last_chunk_is_admitted_leaks_nothing(model, cache, overlap):
    """A request taking its last chunk sits only in the batch being built: abort_all must still find it."""
    engine = Engine(model, max_total_tokens=256, max_running_requests=2, chunked_prefill_size=16, prefix_cache=cache,
                    disable_overlap_schedule=not overlap)
    sched = engine.scheduler
    real = sched.policy.calc_priority

    def boom(queue):
        if sched.chunked_req is None and sched._admitting:  # the last chunk is taken, and in no other list
            raise RuntimeError("boom")
        return real(queue)
    sched.policy.calc_priority = boom
    with pytest.raises(RuntimeError, match="boom"):
        engine.generate([list(range(10, 50)), list(range(60, 70))], {"max_new_tokens": 2})
    alloc = engine.token_to_kv_pool_allocator
    assert alloc.size - alloc.available_size() == engine.tree_cache.total_size()
    assert engine.req_to_token_pool.available_size() == engine.req_to_token_pool.size
