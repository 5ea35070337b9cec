"""Engine API: arguments, generate's output shape and semantics, bad input, leaks, flush, sampling."""

from __future__ import annotations

import pytest
import torch

from radixlab.engine import Engine
from radixlab.model import load_model

from engine_helpers import DEVICES, assert_no_leak, one_thread


_one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", device="cpu")


@pytest.mark.parametrize("kwargs, word", [
    ({"page_size": 0}, "page_size"), ({"page_size": 1.5}, "page_size"),
    ({"max_total_tokens": 0}, "max_total_tokens"), ({"max_total_tokens": 3, "page_size": 4}, "max_total_tokens"),
    ({"max_running_requests": 0}, "max_running_requests"),
    ({"chunked_prefill_size": 0}, "chunked_prefill_size"),
    ({"chunked_prefill_size": 6, "page_size": 4}, "chunked_prefill_size"),
    ({"disable_radix_cache": "yes"}, "disable_radix_cache"), ({"schedule_policy": "lifo"}, "schedule_policy"),
    ({"max_prefill_tokens": -1}, "max_prefill_tokens"),
])
def test_bad_constructor_argument_raises_valueerror(tiny, kwargs, word):
    with pytest.raises(ValueError, match=word):
        Engine(tiny, **kwargs)


def test_arguments_are_keyword_only_and_pools_have_sglang_names(tiny):
    with pytest.raises(TypeError):
        Engine(tiny, 4)  # noqa
    e = Engine(tiny, page_size=4, max_total_tokens=130)
    assert e.max_total_tokens == 128  # rounded down to whole pages
    for name in ("req_to_token_pool", "token_to_kv_pool_allocator", "token_to_kv_pool", "tree_cache"):
        assert getattr(e, name) is not None
    assert e.token_to_kv_pool.size == e.token_to_kv_pool_allocator.size == 128


def test_generate_shapes_single_and_list(tiny):
    e = Engine(tiny)
    one = e.generate("hello", {"max_new_tokens": 3})
    assert isinstance(one, dict) and set(one) == {"text", "output_ids", "meta_info"}
    m = one["meta_info"]
    assert (m["prompt_tokens"], m["completion_tokens"], m["cached_tokens"]) == (5, 3, 0)
    assert 0 < m["ttft"] <= m["e2e_latency"]
    assert one["text"] == tiny.tokenizer.decode(one["output_ids"])
    ids = e.generate([104, 101, 108, 108, 111], {"max_new_tokens": 3})  # token ids: used as given
    assert isinstance(ids, dict) and ids["output_ids"] == one["output_ids"]
    many = e.generate(["b" * 20, "a" * 5, [1, 2, 3]], [{"max_new_tokens": n} for n in (4, 1, 2)])
    assert [len(o["output_ids"]) for o in many] == [4, 1, 2]  # input order kept
    assert [o["meta_info"]["prompt_tokens"] for o in many] == [20, 5, 3]


def test_tree_persists_until_flush_and_cached_tokens_rules(tiny):
    e = Engine(tiny, page_size=4)
    prompt = list(range(10, 40))  # 30 tokens
    assert e.generate(prompt, {"max_new_tokens": 2})["meta_info"]["cached_tokens"] == 0
    second = e.generate(prompt, {"max_new_tokens": 2})["meta_info"]
    assert second["cached_tokens"] == 28  # page-aligned, at most prompt_tokens - 1 (29 → 28)
    e4 = Engine(tiny, page_size=1)
    e4.generate(prompt, {"max_new_tokens": 0})
    assert e4.generate(prompt, {"max_new_tokens": 1})["meta_info"]["cached_tokens"] == 29  # the last is computed
    assert e.flush_cache()
    assert e.token_to_kv_pool_allocator.available_size() == e.max_total_tokens
    assert e.generate(prompt, {"max_new_tokens": 2})["meta_info"]["cached_tokens"] == 0


def test_own_chunks_do_not_count_as_cached(tiny):
    e = Engine(tiny, page_size=4, chunked_prefill_size=8)
    out = e.generate(list(range(50)), {"max_new_tokens": 2})
    assert out["meta_info"]["cached_tokens"] == 0
    assert e.stats.extend_batches == 7  # 50 tokens in chunks of 8
    assert e.generate(list(range(50)), {"max_new_tokens": 2})["meta_info"]["cached_tokens"] == 48


def test_extra_key_namespaces(tiny):
    e = Engine(tiny)
    p = list(range(20))
    e.generate(p, {"max_new_tokens": 1}, extra_key="alice")
    assert e.generate(p, {"max_new_tokens": 1}, extra_key="bob")["meta_info"]["cached_tokens"] == 0
    assert e.generate(p, {"max_new_tokens": 1}, extra_key="alice")["meta_info"]["cached_tokens"] == 19
    outs = e.generate([p, p], {"max_new_tokens": 1}, extra_key=["alice", None])
    assert [o["meta_info"]["cached_tokens"] for o in outs] == [19, 0]


@pytest.mark.parametrize("prompts, params, word", [
    (["ok", ""], None, "prompt 1 is empty"),
    (["ok", [5, 300]], None, "prompt 1 holds token id 300"),
    ([[1, -2]], None, "prompt 0 holds token id -2"),
    (["ok", "fine"], [{"max_new_tokens": 1}, {"max_new_tokens": -1}], "prompt 1: max_new_tokens"),
    (["ok", "x" * 200], {"max_new_tokens": 60}, "prompt 1 can never fit"),
    (["ok"], {"max_new_tokens": 2, "temperature": -1}, "prompt 0: temperature"),
    (["ok"], {"max_new_tokens": 2, "beam": 3}, "prompt 0: unknown sampling_params"),
    ([], None, "prompts"),
    (["a", "b"], [{"max_new_tokens": 1}], "sampling_params"),
])
def test_bad_input_names_the_prompt_and_runs_nothing(tiny, prompts, params, word):
    e = Engine(tiny, page_size=4, max_total_tokens=256)
    e.generate("warm the tree up", {"max_new_tokens": 2})
    before = (e.token_to_kv_pool_allocator.pages_in_use(), e.tree_cache.format(), e.stats.extend_batches)
    with pytest.raises(ValueError, match=word):
        e.generate(prompts, params)
    assert (e.token_to_kv_pool_allocator.pages_in_use(), e.tree_cache.format(), e.stats.extend_batches) == before
    assert_no_leak(e)
    assert e.generate("still works", {"max_new_tokens": 2})["meta_info"]["completion_tokens"] == 2


def test_unknown_adapter_is_rejected(tiny):
    with pytest.raises(ValueError, match="prompt 0: lora_path 'nope'"):
        Engine(tiny).generate("hi", lora_path="nope")


def test_error_mid_run_leaves_nothing_taken(tiny, monkeypatch):
    e = Engine(tiny, page_size=4)
    e.generate("a shared system prompt", {"max_new_tokens": 2})
    calls = {"n": 0}
    real = e.model_runner.forward

    def flaky(batch):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("device lost")
        return real(batch)
    monkeypatch.setattr(e.model_runner, "forward", flaky)
    with pytest.raises(RuntimeError, match="device lost"):
        e.generate(["a shared system prompt, then a question", "another"], {"max_new_tokens": 5})
    assert_no_leak(e)
    monkeypatch.setattr(e.model_runner, "forward", real)
    assert e.generate("again", {"max_new_tokens": 2})["meta_info"]["completion_tokens"] == 2


@pytest.mark.parametrize("device", DEVICES)
def test_sampling_is_seeded(device):
    model = load_model("tiny", device=device)
    e = Engine(model)
    sp = {"max_new_tokens": 12, "temperature": 1.0, "sampling_seed": 7}
    a, b = e.generate("sample me", sp), e.generate("sample me", sp)
    assert a["output_ids"] == b["output_ids"]
    c = e.generate("sample me", {**sp, "sampling_seed": 8})
    assert c["output_ids"] != a["output_ids"]
    greedy = e.generate("sample me", {"max_new_tokens": 12})
    assert greedy["output_ids"] != a["output_ids"]
    k1 = e.generate("sample me", {"max_new_tokens": 6, "temperature": 1.0, "top_k": 1})
    assert k1["output_ids"] == greedy["output_ids"][:6]  # top_k=1 is greedy


def test_context_manager_shuts_down(tiny):
    with Engine(tiny) as e:
        e.generate("x", {"max_new_tokens": 1})
    with pytest.raises(RuntimeError, match="shut down"):
        e.generate("x")


def test_eos_stops_generation():
    model = load_model("tiny", device="cpu")
    first = Engine(model).generate("stop here", {"max_new_tokens": 6})["output_ids"]
    model.config.eos_token_id = first[2]
    try:
        out = Engine(model).generate("stop here", {"max_new_tokens": 6})
        assert out["output_ids"] == first[:3] and out["meta_info"]["finish_reason"] == "stop"
        out = Engine(model).generate("stop here", {"max_new_tokens": 6, "ignore_eos": True})
        assert out["output_ids"] == first
    finally:
        model.config.eos_token_id = None


@pytest.mark.parametrize("page_size, chunk", [(1, None), (4, 8), (16, None)])
def test_step_by_step_every_page_has_one_owner(tiny, page_size, chunk):
    """Driving the loop by hand: after every step each allocated page belongs to the tree or to
    exactly one live request (its own pages past ``cache_protected_len``), never to two."""
    from engine_helpers import shared_prefix_prompts

    e = Engine(tiny, page_size=page_size, max_total_tokens=256, chunked_prefill_size=chunk)
    reqs = e.add_requests(shared_prefix_prompts(3, n=8), {"max_new_tokens": 5})
    alloc, tree = e.token_to_kv_pool_allocator, e.tree_cache
    steps = 0
    while e.step() is not None:
        steps += 1
        tree.check_invariants()
        owners = {int(s) // page_size for n in tree.nodes() for s in n.value.tolist()}
        for r in reqs:
            if r.req_pool_idx is None:
                continue
            row = e.req_to_token_pool.req_to_token[r.req_pool_idx, :r.seq_len].tolist()
            assert row[:r.cache_protected_len] == r.prefix_indices[:r.cache_protected_len].tolist()
            own = {s // page_size for s in row[r.cache_protected_len:]}
            assert not own & owners, f"step {steps}: a page is owned twice"
            owners |= own
        assert alloc.pages_in_use() == owners, f"step {steps}: allocated pages without an owner"
    assert all(r.is_done() for r in reqs) and steps > 5
    assert [e.result(r)["output_ids"] for r in reqs] == [
        o["output_ids"] for o in Engine(tiny).generate([r.origin_input_ids for r in reqs], {"max_new_tokens": 5})]
    assert_no_leak(e)
