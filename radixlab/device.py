"""Where tensors live: CUDA when present, else the CPU. ``RADIXLAB_DEVICE`` overrides.

Nothing in the course requires a GPU; the later notebooks use the same code on either device.
"""

from __future__ import annotations

import os

import torch


def default_device() -> torch.device:
    """``RADIXLAB_DEVICE`` if set (e.g. ``cpu``, ``cuda:0``), else ``cuda`` when available, else ``cpu``."""
    name = os.environ.get("RADIXLAB_DEVICE", "").strip()
    if name:
        try:
            device = torch.device(name)
        except RuntimeError as exc:
            raise ValueError(f"RADIXLAB_DEVICE must name a torch device such as 'cpu' or 'cuda', got {name!r}") from exc
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"RADIXLAB_DEVICE={name!r} but CUDA is not available on this machine")
        return device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
