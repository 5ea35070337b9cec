"""``ModelRunner``: turns a ``ScheduleBatch`` into a ``ForwardBatch``, runs the model, samples.

Mirrors ``sglang/srt/model_executor/model_runner.py`` (``forward``) and the sampler
(``sglang/srt/layers/sampler.py``). The model returns logits for every new token; only each
request's last one is sampled (SGLang's ``LogitsProcessor`` keeps just those rows).

Sampling: greedy (``argmax``) when ``temperature == 0``; otherwise temperature, ``top_k`` and
``top_p``, drawn with the request's own ``torch.Generator`` seeded from ``sampling_seed``, on the
CPU so the same seed gives the same tokens on every device. A row of a request still mid-prompt (a
chunk of a chunked prefill) is not sampled and leaves its generator untouched: the same seed gives
the same tokens whatever the chunk size and however much of the prompt was cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..model.forward_batch import ForwardBatch
from .schedule_batch import ScheduleBatch


@dataclass
class GenerationBatchResult:
    """What one model step hands to ``Scheduler.process_batch_result``."""

    next_token_ids: list[int]
    logits: torch.Tensor  # [batch_size, vocab], each request's last new token (fp32, CPU)


class ModelRunner:
    """Owns the model and the KV pool; runs one batch at a time."""

    def __init__(self, model: Any, req_to_token_pool: Any, token_to_kv_pool: Any, device: torch.device) -> None:
        self.model = model
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool = token_to_kv_pool
        self.device = device

    def build_forward_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        return ForwardBatch.build(
            batch.forward_mode, batch.new_token_ids, [r.req_pool_idx for r in batch.reqs], batch.prefix_lens,
            batch.out_cache_loc, lora_ids=[r.lora_id for r in batch.reqs], device=self.device)

    @torch.inference_mode()
    def forward(self, batch: ScheduleBatch) -> GenerationBatchResult:
        forward_batch = self.build_forward_batch(batch)
        logits = self.model.forward(forward_batch, self.req_to_token_pool, self.token_to_kv_pool)
        last = logits[forward_batch.last_token_indices().to(logits.device)].float().cpu()
        mid_chunk = [batch.forward_mode.is_extend() and p + len(t) < len(r.origin_input_ids)
                     for r, p, t in zip(batch.reqs, batch.prefix_lens, batch.new_token_ids)]
        return GenerationBatchResult(self.sample(last, batch.reqs, mid_chunk), last)

    @staticmethod
    def sample(logits: torch.Tensor, reqs: list[Any], mid_chunk: list[bool] | None = None) -> list[int]:
        """One token per row; a ``mid_chunk`` row gets its argmax (discarded by the scheduler), no draw."""
        out = []
        for i, (row, req) in enumerate(zip(logits, reqs)):
            if req.temperature == 0 or (mid_chunk is not None and mid_chunk[i]):
                out.append(int(torch.argmax(row)))
                continue
            scores = row / req.temperature
            if req.top_k > 0:
                kth = torch.topk(scores, min(req.top_k, len(scores))).values[-1]
                scores = scores.masked_fill(scores < kth, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            if req.top_p < 1.0:
                sorted_p, order = torch.sort(probs, descending=True)
                drop = torch.cumsum(sorted_p, 0) - sorted_p > req.top_p  # keep the smallest head reaching top_p
                probs = probs.scatter(0, order[drop], 0.0)
            if req.generator is None:
                req.generator = torch.Generator().manual_seed(req.sampling_seed)
            out.append(int(torch.multinomial(probs, 1, generator=req.generator)))
        return out
