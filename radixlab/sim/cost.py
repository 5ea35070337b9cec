"""Why prefix caching matters: prefill compute with and without reusing a cached prefix.

``prefill_flops`` is the standard transformer estimate (matmuls plus causal attention), and
``serve_with_cache`` pushes real requests through a real ``RadixCache`` to count how many prompt
tokens must be computed. Notebook 00_welcome plots both; ``measure_prefill_seconds`` times a small
torch decoder so the analytic curve can be checked against a clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import torch

from ..mem_cache import FastRadixCache, RadixKey
from ..utils.checks import check_int


def prefill_flops(n_new: int, n_cached: int = 0, d_model: int = 4096, n_layers: int = 32,
                  d_ff: int | None = None) -> int:
    """FLOPs to prefill ``n_new`` tokens after ``n_cached`` already-cached ones.

    Per layer and new token the dense matmuls cost 2·(4·d² + 2·d·d_ff) FLOPs (Q, K, V, O
    projections and the two MLP matrices); attention adds 2·2·d FLOPs per (query, key) pair, and
    every new token attends to all cached tokens and to the new ones before it.
    """
    for name, v in (("n_new", n_new), ("n_cached", n_cached), ("d_model", d_model), ("n_layers", n_layers)):
        check_int(v, name, 0)
    d_ff = 4 * d_model if d_ff is None else d_ff
    dense = 2 * (4 * d_model * d_model + 2 * d_model * d_ff) * n_new
    # query i (0-based among new tokens) attends to n_cached + i + 1 keys: QK^T and AV, 2 FLOPs each
    pairs = n_new * n_cached + n_new * (n_new + 1) // 2
    attn = 2 * 2 * d_model * pairs
    return n_layers * (dense + attn)


@dataclass
class ServeStats:
    prompt_tokens: int
    computed_tokens: int
    reused_tokens: int
    hits: list[int]  # cached tokens found for each request, in order

    @property
    def hit_rate(self) -> float:
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def serve_with_cache(prompts: Sequence[Sequence[int]], page_size: int = 1) -> ServeStats:
    """Send ``prompts`` in order through a fresh RadixCache; count prompt tokens reused vs computed."""
    cache = FastRadixCache(page_size=page_size)
    hits = []
    total = 0
    for p in prompts:
        key = RadixKey(p)
        hits.append(len(cache.match_prefix(key).device_indices))
        cache.insert(key)
        total += len(key)
    return ServeStats(total, total - sum(hits), sum(hits), hits)


class _TinyDecoder(torch.nn.Module):
    def __init__(self, d_model: int, n_layers: int) -> None:
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=4 * d_model,
                                                 batch_first=True, dropout=0.0)
        self.layers = torch.nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is None:
            mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.layers(x, mask=mask, is_causal=True)


def measure_prefill_seconds(lengths: Sequence[int], d_model: int = 128, n_layers: int = 2,
                            repeats: int = 3, seed: int = 0) -> list[float]:
    """Best-of-``repeats`` wall time of a causal forward pass over each prompt length (CPU or CUDA)."""
    torch.manual_seed(seed)
    model = _TinyDecoder(d_model, n_layers).eval()
    times = []
    with torch.inference_mode():
        for n in lengths:
            x = torch.randn(1, n, d_model)
            mask = torch.nn.Transformer.generate_square_subsequent_mask(n)  # built once, outside the clock
            model(x, mask)  # warm up
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                model(x, mask)
                best = min(best, time.perf_counter() - t0)
            times.append(best)
    return times


def plot_prefill_scaling(lengths: Sequence[int], d_model: int = 128, n_layers: int = 2, repeats: int = 2,
                         seconds: Sequence[float] | None = None):
    """Plot measured prefill time beside the FLOP estimate, both relative to the middle length, on log
    axes (notebook 00), and label the last point of each curve with its ratio. ``seconds``: times already
    measured for ``lengths`` (so the plot shows the very numbers a cell printed); without it,
    ``measure_prefill_seconds`` measures them. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt

    if len(lengths) < 2:
        raise ValueError(f"lengths must hold at least two prompt lengths, got {list(lengths)}")
    if seconds is None:
        seconds = measure_prefill_seconds(lengths, d_model=d_model, n_layers=n_layers, repeats=repeats)
    elif len(seconds) != len(lengths) or not all(s > 0 for s in seconds):
        raise ValueError(f"seconds must hold one positive time per length, got {list(seconds)} for {list(lengths)}")
    flops = [prefill_flops(n, d_model=d_model, n_layers=n_layers) for n in lengths]
    mid = len(lengths) // 2
    measured = [s / seconds[mid] for s in seconds]
    estimated = [f / flops[mid] for f in flops]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(lengths, measured, "o-", label="measured time (tiny model)")
    ax.plot(lengths, estimated, "s--", label="FLOP estimate")
    upper = measured[-1] >= estimated[-1]
    for ys, above in ((measured, upper), (estimated, not upper)):  # the last point's ratio, right of it
        ax.annotate(f"{ys[-1]:.1f}×", (lengths[-1], ys[-1]), textcoords="offset points", xytext=(7, 0),
                    ha="left", va="bottom" if above else "top")
    ax.set_xscale("log", base=2)
    ax.set_xlim(lengths[0] / 1.3, lengths[-1] * 1.7)
    ax.set_yscale("log")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel(f"relative to {lengths[mid]} tokens")
    ax.set_title("Prefill cost grows with the prompt")
    ax.legend()
    return fig
