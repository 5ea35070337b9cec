"""Checking and normalising ``generate``'s arguments (SGLang: ``managers/io_struct.py``, ``GenerateReqInput``).

``sampling_params`` keys follow SGLang's ``SamplingParams``: ``max_new_tokens``, ``temperature``,
``top_k``, ``top_p``, ``sampling_seed``, ``ignore_eos``, ``stop_token_ids``. Every error names the
prompt's index and the argument, and is raised before anything runs (``TypeError`` for a value of
the wrong type, ``ValueError`` for one out of range), so one bad request never reaches a batch.
As SGLang's ``SamplingParams``, a temperature below ``SAMPLING_EPS`` means greedy. Integers that a
device backend packs into int64 (``sampling_seed``, ``top_k``) must fit in it: SGLang packs them too.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import torch

from ..utils.checks import check_int

DEFAULT_SAMPLING_PARAMS = {"max_new_tokens": 16, "temperature": 0.0}
SAMPLING_KEYS = {"max_new_tokens", "temperature", "top_k", "top_p", "sampling_seed", "ignore_eos", "stop_token_ids"}
SAMPLING_EPS = 1e-6  # SGLang's _SAMPLING_EPS: a smaller temperature is greedy (dividing by it overflows)
INT64_MAX = 2 ** 63 - 1  # the largest seed or top_k a device backend can stage (int64)


def _check_int(value: Any, name: str, minimum: int, maximum: int | None = None) -> int:
    """``check_int`` with a ``ValueError`` for every failure (the constructor's historical contract)."""
    try:
        return check_int(value, name, minimum, maximum)
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def per_prompt(value: Any, n: int, name: str, kind: type) -> list:
    """``value`` for every prompt: one value for all, or a list with one per prompt."""
    if value is None or isinstance(value, kind):
        return [dict(value) if isinstance(value, dict) else value] * n
    if isinstance(value, (list, tuple)) and len(value) == n and all(v is None or isinstance(v, kind) for v in value):
        return [dict(v) if isinstance(v, dict) else v for v in value]
    raise ValueError(f"{name} must be one {kind.__name__} or a list of {n} (one per prompt), got {value!r:.80}")


def _check_float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    try:
        out = float(value)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return out


def _stop_token_ids(value: Any, name: str) -> frozenset:
    if isinstance(value, torch.Tensor):
        value = value.tolist() if value.dim() == 1 else value
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise TypeError(f"{name} must be a list of token ids, got {type(value).__name__} {value!r:.40}")
    return frozenset(check_int(t, f"{name}[{j}]", 0) for j, t in enumerate(value))


def normalize_sampling_params(sp: dict, i: int) -> dict:
    """Prompt ``i``'s sampling parameters, checked, with defaults filled in."""
    unknown = set(sp) - SAMPLING_KEYS
    if unknown:
        raise ValueError(f"prompt {i}: unknown sampling_params {sorted(unknown)}; known: {sorted(SAMPLING_KEYS)}")
    p = f"prompt {i}: "
    out = {"max_new_tokens": check_int(sp.get("max_new_tokens", 16), p + "max_new_tokens", 0)}
    t = _check_float(sp.get("temperature", 0.0), p + "temperature")
    if t < 0:
        raise ValueError(f"{p}temperature must be >= 0, got {t!r}")
    out["temperature"] = 0.0 if t < SAMPLING_EPS else t  # SGLang: greedy below _SAMPLING_EPS
    if "top_k" in sp:
        k = check_int(sp["top_k"], p + "top_k", -1, INT64_MAX)
        if k == 0:
            raise ValueError(f"{p}top_k must be -1 (all) or a positive int, got 0")
        out["top_k"] = k
    if "top_p" in sp:
        top_p = _check_float(sp["top_p"], p + "top_p")
        if not 0 < top_p <= 1:
            raise ValueError(f"{p}top_p must be in (0, 1], got {sp['top_p']!r}")
        out["top_p"] = top_p
    if sp.get("sampling_seed") is not None:
        out["sampling_seed"] = check_int(sp["sampling_seed"], p + "sampling_seed", 0, INT64_MAX)
    if sp.get("ignore_eos") is not None:  # None: the default, as for every optional key
        if not isinstance(sp["ignore_eos"], bool):
            raise TypeError(f"{p}ignore_eos must be a bool, got {type(sp['ignore_eos']).__name__} "
                            f"{sp['ignore_eos']!r}")
        out["ignore_eos"] = sp["ignore_eos"]
    if sp.get("stop_token_ids") is not None:
        stop = _stop_token_ids(sp["stop_token_ids"], p + "stop_token_ids")
        if stop:
            out["stop_token_ids"] = stop
    return out
