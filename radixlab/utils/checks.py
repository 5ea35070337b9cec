"""The one place integer and index-tensor arguments are checked: clear errors that name the argument.

Every check raises before anything is changed, so a caller that checks first leaves its structure
whole on bad input.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any, Sequence

import torch


def is_index_dtype(dtype: torch.dtype) -> bool:
    """An integer dtype (what token ids and slot indices may be): not float, complex or bool."""
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def check_int(value: Any, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an ``int``; ``TypeError`` for a non-integer (a bool too), ``ValueError`` out of range."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return int(value)


def check_index_list(indices: Any, name: str) -> list[int]:
    """A 1-D integer tensor or a sequence of ints as a list of ints; a clear error otherwise."""
    if isinstance(indices, torch.Tensor):
        if not is_index_dtype(indices.dtype) or indices.dim() != 1:
            raise TypeError(f"{name} must be a 1-D integer tensor, got {indices.dtype} with shape "
                            f"{tuple(indices.shape)}")
        return indices.tolist()  # an integer tensor's tolist() is already Python ints
    if isinstance(indices, (str, bytes)) or not isinstance(indices, Sequence):
        raise TypeError(f"{name} must be a sequence or tensor of indices, got {type(indices).__name__}")
    out = []
    for i in indices:
        if isinstance(i, bool) or not isinstance(i, Integral):
            raise TypeError(f"{name} must hold integer indices, got {i!r}")
        out.append(int(i))
    return out
