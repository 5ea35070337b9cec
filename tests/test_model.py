"""The model: the serving path through the KV pool gives the logits of the plain dense forward.

Every comparison is against ``forward_dense`` on the request's whole token sequence (fp32, 1e-4).
Device-parametrized: CPU always, CUDA when present.
"""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
import torch
from model_harness import Harness

from radixlab.mem_cache import MHATokenToKVPool, ReqToTokenPool
from radixlab.model import ForwardBatch, ForwardMode, LlamaForCausalLM, ModelConfig, load_model, tiny_config

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
TOL = 1e-4


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny tensors gain nothing from a second intra-op thread, and on a busy 2-core machine its
    spin-waits make each step ~30x slower: run this module single-threaded, then restore."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module", params=DEVICES)
def model(request):
    return load_model("tiny", device=request.param)


def dense(model, tokens, lora=None):
    return model.forward_dense(torch.tensor(tokens), lora_path=lora)


def rand_tokens(rng, n):
    return [rng.randrange(256) for _ in range(n)]


def assert_close(got, want, what=""):
    diff = (got - want).abs().max().item()
    assert diff < TOL, f"{what}: max |pool - dense| = {diff:.3g}"


# ---- the tiny model itself ----------------------------------------------------------------------

def test_tiny_model_is_seeded_small_and_has_no_eos():
    a, b = load_model("tiny", device="cpu"), load_model("tiny", device="cpu")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert a.config == tiny_config() and a.config.eos_token_id is None and a.tokenizer.eos_token_id is None
    assert a.dtype == torch.float32 and a.device.type == "cpu"
    assert a.config.num_key_value_heads < a.config.num_attention_heads  # grouped-query attention is exercised
    assert sum(p.numel() for p in a.parameters()) < 500_000
    assert a.tokenizer.decode(a.tokenizer.encode("héllo")) == "héllo"
    assert a.config.vocab_size == 256


def test_load_model_names_and_device_default(monkeypatch):
    with pytest.raises(ValueError, match=r"unknown model name 'llama'.*'tiny', 'smollm2-135m'"):
        load_model("llama")
    with pytest.raises(ValueError, match="dtype must be a floating-point"):
        load_model("tiny", dtype=torch.int64)
    monkeypatch.setenv("RADIXLAB_DEVICE", "cpu")
    assert load_model("tiny").device.type == "cpu"
    assert load_model("tiny", dtype=torch.float64).forward_dense(torch.tensor([1, 2])).dtype == torch.float64


def test_importing_the_model_does_not_import_transformers():
    code = "import sys, radixlab.model; m = radixlab.model.load_model('tiny', device='cpu'); " \
           "print('transformers' in sys.modules, 'gguf' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_greedy_gaps_are_far_above_fp32_noise():
    """Token-for-token equality of cached and dense greedy decoding needs every greedy decision's
    top-1/top-2 gap far above the pool-vs-dense difference: 40 random prompts, 9 decisions each."""
    model = load_model("tiny", device="cpu")
    rng = random.Random(7)
    h = Harness(model, page_size=4, size=8192, rows=64, max_context_len=128)
    gaps, max_diff = [], 0.0
    for _ in range(40):
        tokens = rand_tokens(rng, rng.randint(2, 60))
        req = h.new_request()
        got = [h.step(ForwardMode.EXTEND, [(req, tokens)])[0][-1:]]
        for _ in range(8):
            got.append(h.step(ForwardMode.DECODE, [(req, [int(got[-1][-1].argmax())])])[0])
        want = dense(model, req.tokens)[len(tokens) - 1:]
        max_diff = max(max_diff, (torch.cat(got) - want).abs().max().item())
        top = want.topk(2, dim=-1).values
        gaps += (top[:, 0] - top[:, 1]).tolist()
    assert len(gaps) == 360 and max_diff < 1e-4, max_diff
    assert min(gaps) > 1e-3 and min(gaps) > 10 * max_diff, (min(gaps), max_diff)
    assert sorted(gaps)[len(gaps) // 2] > 1.0  # a typical decision is not close at all


# ---- serving path == dense ----------------------------------------------------------------------

@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_extend_of_a_whole_prompt(model, page_size):
    h, rng = Harness(model, page_size), random.Random(page_size)
    tokens = rand_tokens(rng, 37)
    got = h.step(ForwardMode.EXTEND, [(h.new_request(), tokens)])[0]
    assert got.shape == (37, 256)
    assert_close(got, dense(model, tokens), "whole-prompt extend")


@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_cached_prefix_then_decode(model, page_size):
    """B reuses A's first pages from the pool (as a radix-cache hit would), extends, then decodes."""
    h, rng = Harness(model, page_size), random.Random(10 + page_size)
    shared = rand_tokens(rng, 2 * 16 + 3)
    a = h.new_request()
    h.step(ForwardMode.EXTEND, [(a, shared + rand_tokens(rng, 5))])
    n = len(shared) // page_size * page_size
    b = h.new_request(share=(a, n))
    tail = shared[n:] + rand_tokens(rng, 6)
    got = [h.step(ForwardMode.EXTEND, [(b, tail)])[0]]
    for _ in range(5):
        nxt = int(got[-1][-1].argmax())
        got.append(h.step(ForwardMode.DECODE, [(b, [nxt])])[0])
    assert_close(torch.cat(got), dense(model, b.tokens)[n:], f"prefix {n} + extend + 5 decodes")


@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_mixed_batches_with_different_prefix_lengths(model, page_size):
    """One EXTEND batch of requests with prefixes 0, 1 page, 2 pages (already in the pool), then batched DECODEs."""
    h, rng = Harness(model, page_size), random.Random(20 + page_size)
    base = rand_tokens(rng, 2 * page_size + 5)
    warm = h.new_request()
    h.step(ForwardMode.EXTEND, [(warm, base)])
    reqs = [h.new_request(), h.new_request(share=(warm, page_size)), h.new_request(share=(warm, 2 * page_size))]
    news = [rand_tokens(rng, k) for k in (9, 3, 1)]
    outs = h.step(ForwardMode.EXTEND, list(zip(reqs, news)))
    logits = {id(r): [o] for r, o in zip(reqs, outs)}
    for _ in range(4):
        work = [(r, [int(logits[id(r)][-1][-1].argmax())]) for r in reqs]
        for r, o in zip(reqs, h.step(ForwardMode.DECODE, work)):
            logits[id(r)].append(o)
    for r, pre in zip(reqs, (0, page_size, 2 * page_size)):
        assert_close(torch.cat(logits[id(r)]), dense(model, r.tokens)[pre:], f"request with prefix {pre}")


def test_last_only_returns_each_requests_last_row(model):
    h, rng = Harness(model, 4), random.Random(2)
    reqs, prompts = [h.new_request(), h.new_request()], [rand_tokens(rng, 9), rand_tokens(rng, 4)]
    fb = ForwardBatch.build(ForwardMode.EXTEND, prompts, [r.row for r in reqs], [0, 0],
                            torch.cat([h.allocator.alloc_extend(0, -1, len(p)) for p in prompts]), device=model.device)
    for r, (start, p) in zip(reqs, ((0, prompts[0]), (9, prompts[1]))):
        h.req_to_token_pool.write(r.row, 0, fb.out_cache_loc[start:start + len(p)])
    last = model.forward(fb, h.req_to_token_pool, h.kv_pool, last_only=True)
    assert last.shape == (2, 256) and fb.seq_lens_sum == 13
    assert_close(last[0], dense(model, prompts[0])[-1], "request 0")
    assert_close(last[1], dense(model, prompts[1])[-1], "request 1")


def test_chunked_extend_equals_one_extend(model):
    h, rng = Harness(model, 4), random.Random(3)
    tokens = rand_tokens(rng, 50)
    r = h.new_request()
    got = torch.cat([h.step(ForwardMode.EXTEND, [(r, tokens[i:i + 7])])[0] for i in range(0, 50, 7)])
    assert_close(got, dense(model, tokens), "7-token chunks")


def test_forward_writes_rotated_k_and_v_into_the_slots(model):
    h, rng = Harness(model, 4), random.Random(4)
    tokens = rand_tokens(rng, 11)
    r = h.new_request()
    h.step(ForwardMode.EXTEND, [(r, tokens)])
    slots = h.req_to_token_pool.row(r.row, 11)
    for layer, (k, v) in enumerate(model.dense_kv(torch.tensor(tokens))):
        assert_close(h.kv_pool.get_key_buffer(layer)[slots], k, f"K of layer {layer}")
        assert_close(h.kv_pool.get_value_buffer(layer)[slots], v, f"V of layer {layer}")


# ---- adapters -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def adapted(model):
    m = load_model("tiny", device=model.device)
    m.add_adapter("A", seed=1)
    m.add_adapter("B", seed=2)
    return m


def test_each_adapter_changes_the_output(adapted):
    tokens = rand_tokens(random.Random(5), 20)
    base, a, b = (dense(adapted, tokens, lora) for lora in (None, "A", "B"))
    for x, y in ((base, a), (base, b), (a, b)):
        assert (x - y).abs().max() > 1.0
        assert (x.argmax(-1) != y.argmax(-1)).any()  # greedy tokens differ, not just logits


def test_adapter_kv_differs_so_namespaces_matter(adapted):
    tokens = torch.tensor(rand_tokens(random.Random(6), 12))
    (k0, v0), (ka, va) = adapted.dense_kv(tokens)[1], adapted.dense_kv(tokens, "A")[1]
    assert (v0 - va).abs().max() > 1e-2  # V changes: A's cached K/V are wrong for the base model


@pytest.mark.parametrize("page_size", [1, 4])
def test_mixed_adapter_batch_matches_each_dense_reference(adapted, page_size):
    h, rng = Harness(adapted, page_size), random.Random(30 + page_size)
    prompt = rand_tokens(rng, 13)
    reqs = [h.new_request(lora=lora) for lora in (None, "A", "B", "A")]
    outs = h.step(ForwardMode.EXTEND, [(r, prompt) for r in reqs])  # the same tokens under three adapters
    logits = {id(r): [o] for r, o in zip(reqs, outs)}
    for _ in range(3):
        work = [(r, [int(logits[id(r)][-1][-1].argmax())]) for r in reqs]
        for r, o in zip(reqs, h.step(ForwardMode.DECODE, work)):
            logits[id(r)].append(o)
    for r in reqs:
        assert_close(torch.cat(logits[id(r)]), dense(adapted, r.tokens, r.lora), f"adapter {r.lora}")


def test_adapter_errors(adapted):
    with pytest.raises(ValueError, match=r"lora_path names unknown adapter 'C'; known: \['A', 'B'\]"):
        adapted.forward_dense(torch.tensor([1, 2]), lora_path="C")
    with pytest.raises(ValueError, match="adapter 'A' already exists"):
        adapted.add_adapter("A")
    with pytest.raises(ValueError, match="non-empty str"):
        adapted.add_adapter("")
    with pytest.raises(ValueError, match="rank must be a positive int"):
        adapted.add_adapter("Z", rank=0)
    assert "Z" not in adapted.adapters and "adapters" not in "".join(adapted.state_dict())


# ---- Hugging Face names -------------------------------------------------------------------------

def hf_keys(n_layers, tied):
    keys = ["model.embed_tokens.weight"]
    for i in range(n_layers):
        keys += [f"model.layers.{i}.self_attn.{p}_proj.weight" for p in "qkvo"]
        keys += [f"model.layers.{i}.mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
        keys += [f"model.layers.{i}.input_layernorm.weight", f"model.layers.{i}.post_attention_layernorm.weight"]
    return keys + ["model.norm.weight", "lm_head.weight"]


@pytest.mark.parametrize("tied", [False, True])
def test_state_dict_keys_are_hugging_face_names(tied):
    cfg = ModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, vocab_size=50, tie_word_embeddings=tied)
    m = LlamaForCausalLM(cfg)
    assert sorted(m.state_dict()) == sorted(hf_keys(2, tied))
    assert (m.lm_head.weight is m.model.embed_tokens.weight) == tied
    if tied:  # a tied checkpoint may store the embedding once
        sd = {k: torch.randn_like(v) for k, v in m.state_dict().items() if k != "lm_head.weight"}
        m.load_state_dict(sd)
        assert torch.equal(m.lm_head.weight, sd["model.embed_tokens.weight"])


@pytest.mark.parametrize("tied", [False, True])
def test_logits_equal_transformers_llama_with_the_same_weights(tied):
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=16, intermediate_size=96, vocab_size=300, rope_theta=50000.0,
                                      rms_norm_eps=1e-6, tie_word_embeddings=tied, max_position_embeddings=512)
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(hf_cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.3)  # HF's default init is nearly zero: make every weight matter
    ours = LlamaForCausalLM(ModelConfig.from_dict(hf_cfg.to_dict()))
    ours.load_state_dict(hf.state_dict())
    ids = torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = hf(ids[None]).logits[0]
    assert (ours.forward_dense(ids) - want).abs().max() < 1e-4


# ---- bad input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("ids, match", [
    (torch.tensor([[1, 2]]), "1-D integer tensor"),
    (torch.tensor([1.0, 2.0]), "1-D integer tensor"),
    (torch.tensor([], dtype=torch.int64), "1 .. 4096 tokens"),
    (torch.tensor([1, 256]), "token id 256, outside the vocabulary"),
    (torch.tensor([-1, 2]), "token id -1"),
])
def test_forward_dense_bad_input(model, ids, match):
    with pytest.raises(ValueError, match=match):
        model.forward_dense(ids)


@pytest.mark.parametrize("kwargs, match", [
    (dict(hidden_size=0), "hidden_size must be a positive int"),
    (dict(num_key_value_heads=3), "multiple of num_key_value_heads"),
    (dict(head_dim=15), "head_dim must be even"),
    (dict(rope_theta=0), "rope_theta must be a positive number"),
    (dict(eos_token_id=256), "eos_token_id must be None or a token id"),
    (dict(tie_word_embeddings=1), "tie_word_embeddings must be a bool"),
    (dict(hidden_size=66, head_dim=None), "give head_dim explicitly"),
])
def test_config_errors(kwargs, match):
    args = tiny_config().to_dict()
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ModelConfig(**args)


def test_config_defaults_follow_llama_config():
    c = ModelConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=8, intermediate_size=10, vocab_size=9)
    assert c.num_key_value_heads == 8 and c.head_dim == 8
    assert tiny_config().kv_bytes_per_token() == 2 * 4 * 2 * 16 * 4
    assert ModelConfig.from_dict({**c.to_dict(), "model_type": "llama"}) == c
    five = {**c.to_dict(), "rope_parameters": {"rope_theta": 5e4, "rope_type": "default"}}
    del five["rope_theta"]
    assert ModelConfig.from_dict(five).rope_theta == 5e4  # transformers 5 keeps rope_theta here
    with pytest.raises(ValueError, match="rope scaling 'llama3' is not supported"):
        ModelConfig.from_dict({**c.to_dict(), "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})


def test_forward_batch_errors():
    good = dict(forward_mode=ForwardMode.EXTEND, new_token_ids=[[1, 2, 3], [4]], req_pool_indices=[0, 1],
                prefix_lens=[0, 2], out_cache_loc=[0, 1, 2, 3])
    fb = ForwardBatch.build(**good)
    assert fb.seq_lens.tolist() == [3, 3] and fb.positions.tolist() == [0, 1, 2, 2]
    assert fb.last_token_indices().tolist() == [2, 3]
    bad = [({"out_cache_loc": [0, 1, 2]}, "out_cache_loc must have one entry per new token"),
           ({"new_token_ids": [[1, 2, 3], []], "out_cache_loc": [0, 1, 2]}, ">= 1 new token"),
           ({"prefix_lens": [0]}, "one entry per request"),
           ({"forward_mode": ForwardMode.DECODE}, "DECODE runs exactly one new token"),
           ({"forward_mode": "extend"}, "forward_mode must be a ForwardMode"),
           ({"lora_ids": ["A"]}, "lora_ids must have batch_size=2")]
    for change, match in bad:
        with pytest.raises(ValueError, match=match):
            ForwardBatch.build(**{**good, **change})
    with pytest.raises(ValueError, match="seq_lens must equal"):
        ForwardBatch(**{**fb.__dict__, "seq_lens": torch.tensor([3, 4])})
    with pytest.raises(ValueError, match="positions must run"):
        ForwardBatch(**{**fb.__dict__, "positions": torch.tensor([0, 1, 2, 0])})


def test_forward_rejects_a_mismatched_pool_or_row(model):
    c = model.config
    rows = ReqToTokenPool(2, 8, device=model.device)
    fb = ForwardBatch.build(ForwardMode.EXTEND, [[1, 2]], [0], [0], [0, 1], device=model.device)
    wrong = MHATokenToKVPool(16, 1, torch.float32, c.num_key_value_heads + 1, c.head_dim, c.num_hidden_layers, model.device)
    with pytest.raises(ValueError, match="token_to_kv_pool has"):
        model.forward(fb, rows, wrong)
    pool = MHATokenToKVPool(16, 1, torch.float32, c.num_key_value_heads, c.head_dim, c.num_hidden_layers, model.device)
    with pytest.raises(ValueError, match="req_pool_indices must be rows 0 .. 1"):
        model.forward(ForwardBatch.build(ForwardMode.EXTEND, [[1]], [5], [0], [0], device=model.device), rows, pool)
    with pytest.raises(ValueError, match="seq_lens holds 9"):
        model.forward(ForwardBatch.build(ForwardMode.EXTEND, [[1]], [0], [8], [0], device=model.device), rows, pool)
    with pytest.raises(ValueError, match="token id 999"):
        model.forward(ForwardBatch.build(ForwardMode.EXTEND, [[999]], [0], [0], [0], device=model.device), rows, pool)
    with pytest.raises(ValueError, match="unknown adapter 'X'"):
        model.forward(ForwardBatch.build(ForwardMode.EXTEND, [[1]], [0], [0], [0], lora_ids=["X"], device=model.device),
                      rows, pool)
    assert not any(b.any() for b in pool.k_buffer + pool.v_buffer)  # nothing was written


def test_rotary_frequencies_stay_float32_when_the_model_is_cast():
    """model.to(bfloat16) must not round the RoPE frequencies (a buffer would be cast with the weights)."""
    from radixlab.model import load_model
    from radixlab.model.layers import RotaryEmbedding

    pos = torch.tensor([0, 1000, 4000])
    model = load_model("tiny", device="cpu")
    ropes = [m for m in model.modules() if isinstance(m, RotaryEmbedding)]
    assert ropes
    exact = [r(pos) for r in ropes]
    model.to(torch.bfloat16)
    for rope, (cos, sin) in zip(ropes, exact):
        got = rope(pos)
        assert got[0].dtype == torch.float32 and torch.equal(got[0], cos) and torch.equal(got[1], sin)
