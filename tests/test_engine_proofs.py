"""Proofs (issue 8 §4): serving through the radix cache gives exactly the tokens and logits of dense
greedy decoding, with any page size, under memory pressure (evictions) and chunked prefill; the
no-cache baseline too; cached_tokens is what the tree held; adapters need their namespace; pages
must not be shared half-filled. Tiny model, device-parametrized (CUDA when present)."""

from __future__ import annotations

import random

import pytest

from radixlab.engine import Engine
from radixlab.model import load_model
from radixlab.mem_cache import RadixKey

from engine_helpers import DEVICES, assert_no_leak, check_against_dense, one_thread, shared_prefix_prompts

MIN_GAP = 1e-2  # smallest top-1/top-2 logit gap allowed: 100x the 1e-4 logit tolerance


_one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)


@pytest.fixture(scope="module", params=DEVICES)
def tiny(request):
    return load_model("tiny", device=request.param)


CASES = {  # name: (Engine kwargs, whether evictions must happen)
    "page1": (dict(page_size=1), False),
    "page1-small-batches": (dict(page_size=1, max_prefill_tokens=40), False),
    "page4": (dict(page_size=4), False),
    "page16": (dict(page_size=16), False),
    "page1-pressure": (dict(page_size=1, max_total_tokens=128, max_running_requests=4), True),
    "page4-pressure-chunked": (dict(page_size=4, max_total_tokens=128, chunked_prefill_size=8), True),
    "page16-pressure": (dict(page_size=16, max_total_tokens=192), True),
    "page16-chunked": (dict(page_size=16, chunked_prefill_size=16), False),
    "page4-nocache-chunked": (dict(page_size=4, disable_radix_cache=True, chunked_prefill_size=12), False),
    "page1-nocache": (dict(page_size=1, disable_radix_cache=True, max_total_tokens=128), False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_generate_equals_dense_greedy(tiny, case):
    kwargs, must_evict = CASES[case]
    engine = Engine(tiny, keep_logits=True, **kwargs)
    gaps = []
    for round_, seed in enumerate((1, 2)):  # two generate calls: the second reuses the first's tree
        prompts = shared_prefix_prompts(seed, n=8)
        params = [{"max_new_tokens": random.Random(seed * 100 + i).randint(1, 6)} for i in range(len(prompts))]
        outs = engine.generate(prompts, params)
        for prompt, sp, out in zip(prompts, params, outs):
            m = out["meta_info"]
            assert m["completion_tokens"] == sp["max_new_tokens"] and m["prompt_tokens"] == len(prompt)
            assert m["cached_tokens"] <= len(prompt) - 1 and m["cached_tokens"] % engine.page_size == 0
            if engine.disable_radix_cache:
                assert m["cached_tokens"] == 0
            gaps.append(check_against_dense(tiny, prompt, out))
        assert_no_leak(engine)
    if not engine.disable_radix_cache:
        assert engine.stats.cached_tokens > 0, "the prompt sets share prefixes: the cache must have been used"
    assert (engine.stats.evicted_tokens > 0) == must_evict, f"evicted {engine.stats.evicted_tokens} tokens"
    # Token-for-token equality means something only if no greedy choice was a near-tie.
    assert min(gaps) > MIN_GAP, f"top-1/top-2 gap {min(gaps):.2e} too close to fp32 noise"
    engine.flush_cache()
    assert engine.token_to_kv_pool_allocator.available_size() == engine.max_total_tokens


def test_cached_tokens_is_what_the_tree_held(tiny):
    engine = Engine(tiny, page_size=4)
    rng = random.Random(5)
    for prompt in shared_prefix_prompts(9, n=12):
        held = len(engine.tree_cache.match_prefix(RadixKey(prompt[:-1])))  # before the request runs
        out = engine.generate(prompt, {"max_new_tokens": rng.randint(0, 4)})
        assert out["meta_info"]["cached_tokens"] == held
    assert engine.stats.cached_tokens > 0


def test_adapters_need_their_namespace():
    model = load_model("tiny", device=DEVICES[-1])
    model.add_adapter("A", seed=1, scale=2.0)
    model.add_adapter("B", seed=2, scale=2.0)
    prompt = list(range(40, 90))
    for unsafe in (False, True):
        engine = Engine(model, keep_logits=True, unsafe_ignore_lora_namespace=unsafe)
        a = engine.generate(prompt, {"max_new_tokens": 6}, lora_path="A")
        b = engine.generate(prompt, {"max_new_tokens": 6}, lora_path="B")
        check_against_dense(model, prompt, a, lora_path="A")
        if not unsafe:
            # Namespaced: B computes its own KV and equals its own dense reference.
            assert b["meta_info"]["cached_tokens"] == 0
            check_against_dense(model, prompt, b, lora_path="B")
            assert b["output_ids"] != a["output_ids"]  # the adapters really differ
            safe_b = b
        else:
            # Adapter left out of the namespace: B reuses A's KV, and its output changes.
            assert b["meta_info"]["cached_tokens"] == len(prompt) - 1
            with pytest.raises(AssertionError):
                check_against_dense(model, prompt, b, lora_path="B")
            assert b["output_ids"] != safe_b["output_ids"]


def test_namespace_holds_extra_key_and_adapter_and_cannot_be_forged():
    """The adapter is in the namespace (as SGLang), as a pair: no extra_key string can reach it."""
    model = load_model("tiny", device="cpu")
    model.add_adapter("A", seed=1)
    engine = Engine(model)
    engine.generate([1, 2, 3, 4], {"max_new_tokens": 1}, extra_key="salt", lora_path="A")
    assert {n.key.extra_key for n in engine.tree_cache.nodes()} == {("salt", "A")}
    engine.generate([1, 2, 3, 4], {"max_new_tokens": 1}, lora_path="A")
    assert {n.key.extra_key for n in engine.tree_cache.nodes()} == {("salt", "A"), ("", "A")}
    # A joined string ("salt" + "A") would put this base-model request in adapter A's namespace.
    out = engine.generate([1, 2, 3, 4], {"max_new_tokens": 1}, extra_key="saltA")
    assert out["meta_info"]["cached_tokens"] == 0
    assert {n.key.extra_key for n in engine.tree_cache.nodes()} == {("salt", "A"), ("", "A"), "saltA"}


def _half_page_run(model, unsafe: bool):
    # A: 6 tokens (its second page half full). B shares A's first 5 tokens and arrives one batch
    # later (max_prefill_tokens=6 keeps it out of A's prefill batch), while A is still decoding.
    a = [10, 20, 30, 40, 50, 60]
    b = [10, 20, 30, 40, 50, 99, 98, 97]
    engine = Engine(model, page_size=4, max_prefill_tokens=6, keep_logits=True, unsafe_share_partial_pages=unsafe)
    out_a, out_b = engine.generate([a, b], {"max_new_tokens": 4})
    return a, b, out_a, out_b


def test_sharing_a_half_filled_page_corrupts_the_other_request(tiny):
    a, b, out_a, out_b = _half_page_run(tiny, unsafe=False)
    assert out_b["meta_info"]["cached_tokens"] == 4  # page-aligned: the half page is not shared
    check_against_dense(tiny, a, out_a)
    check_against_dense(tiny, b, out_b)
    a, b, out_a, out_b = _half_page_run(tiny, unsafe=True)
    assert out_b["meta_info"]["cached_tokens"] == 5  # B took A's half-filled page ...
    with pytest.raises(AssertionError):  # ... wrote its own token 5 into A's slot 5: A's logits change
        check_against_dense(tiny, a, out_a)
