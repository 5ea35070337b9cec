"""Checking and normalising ``generate``'s arguments (SGLang: ``managers/io_struct.py``, ``GenerateReqInput``).

``sampling_params`` keys follow SGLang's ``SamplingParams``: ``max_new_tokens``, ``temperature``,
``top_k``, ``top_p``, ``sampling_seed``, ``ignore_eos``, ``stop_token_ids``. Every error names the
prompt's index, and is raised before anything runs.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

DEFAULT_SAMPLING_PARAMS = {"max_new_tokens": 16, "temperature": 0.0}
SAMPLING_KEYS = {"max_new_tokens", "temperature", "top_k", "top_p", "sampling_seed", "ignore_eos", "stop_token_ids"}


def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def per_prompt(value: Any, n: int, name: str, kind: type) -> list:
    """``value`` for every prompt: one value for all, or a list with one per prompt."""
    if value is None or isinstance(value, kind):
        return [dict(value) if isinstance(value, dict) else value] * n
    if isinstance(value, (list, tuple)) and len(value) == n and all(v is None or isinstance(v, kind) for v in value):
        return [dict(v) if isinstance(v, dict) else v for v in value]
    raise ValueError(f"{name} must be one {kind.__name__} or a list of {n} (one per prompt), got {value!r:.80}")


def normalize_sampling_params(sp: dict, i: int) -> dict:
    """Prompt ``i``'s sampling parameters, checked, with defaults filled in."""
    unknown = set(sp) - SAMPLING_KEYS
    if unknown:
        raise ValueError(f"prompt {i}: unknown sampling_params {sorted(unknown)}; known: {sorted(SAMPLING_KEYS)}")
    out = {"max_new_tokens": sp.get("max_new_tokens", 16), "temperature": sp.get("temperature", 0.0)}
    mnt = out["max_new_tokens"]
    if isinstance(mnt, bool) or not isinstance(mnt, Integral) or mnt < 0:
        raise ValueError(f"prompt {i}: max_new_tokens must be an int >= 0, got {mnt!r}")
    t = out["temperature"]
    if isinstance(t, bool) or not isinstance(t, Real) or t < 0:
        raise ValueError(f"prompt {i}: temperature must be a number >= 0, got {t!r}")
    out["temperature"] = float(t)
    if "top_k" in sp:
        if isinstance(sp["top_k"], bool) or not isinstance(sp["top_k"], Integral) or sp["top_k"] == 0 or sp["top_k"] < -1:
            raise ValueError(f"prompt {i}: top_k must be -1 (all) or a positive int, got {sp['top_k']!r}")
        out["top_k"] = int(sp["top_k"])
    if "top_p" in sp:
        if isinstance(sp["top_p"], bool) or not isinstance(sp["top_p"], Real) or not 0 < sp["top_p"] <= 1:
            raise ValueError(f"prompt {i}: top_p must be in (0, 1], got {sp['top_p']!r}")
        out["top_p"] = float(sp["top_p"])
    if sp.get("sampling_seed") is not None:
        out["sampling_seed"] = _check_int(sp["sampling_seed"], f"prompt {i}: sampling_seed", 0)
    if "ignore_eos" in sp:
        out["ignore_eos"] = bool(sp["ignore_eos"])
    if sp.get("stop_token_ids"):
        out["stop_token_ids"] = frozenset(int(t) for t in sp["stop_token_ids"])
    return out
