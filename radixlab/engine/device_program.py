"""The engine's device program: what runs on a device backend's side of the launch (notebook 08).

``EngineProgram.stage`` (host) turns a ``ScheduleBatch`` into the integer fields a launch stages;
``EngineProgram.forward`` (device: the worker process or a CUDA stream) rebuilds the ``ForwardBatch``
from them, runs the model on the shared KV pool and samples with each request's own generator, kept
on the device by row. ``snapshot`` copies the batch's req-to-token rows during the read, so the host
may rewrite rows once the WAR barrier has passed. ``attach_backend`` moves an engine's scheduler onto
such a backend. SGLang's counterpart is ``TpModelWorker.forward_batch_generation`` on the forward
stream; its sampling state lives in the batch (``SamplingBatchInfo``), ours by row on the device.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from ..model.forward_batch import ForwardBatch, ForwardMode
from .backends import make_backend
from .device_backend import DeviceBackend, DeviceProgram
from .model_runner import ModelRunner

EXTEND, DECODE = 1, 2


def _f64_bits(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).view(torch.int64)


class EngineProgram(DeviceProgram):
    """The device side of the engine: the model, the KV pool, the req-to-token table, sampling."""

    def __init__(self, model: Any, req_to_token_pool: Any, token_to_kv_pool: Any, lora_names: list[str],
                 keep_logits: bool = False) -> None:
        self.model = model
        self.keep_logits = keep_logits
        self.extra: Any = None
        self.req_to_token_pool = req_to_token_pool
        self.token_to_kv_pool = token_to_kv_pool
        self.lora_names = lora_names
        self.sampling: dict[int, SimpleNamespace] = {}  # req_pool_idx -> its sampling state (device side)

    def setup(self, device: torch.device) -> None:
        self.device = device

    def stage(self, batch: Any) -> dict[str, torch.Tensor]:
        """The host side: ``batch``'s inputs as the integer fields of one launch (a decode batch's
        input ids are not staged: the device reads them from its future map)."""
        reqs, is_extend = batch.reqs, batch.forward_mode.is_extend()
        fields = {
            "mode": torch.tensor([EXTEND if is_extend else DECODE]),
            "req_pool_indices": torch.tensor([r.req_pool_idx for r in reqs]),
            "prefix_lens": torch.tensor(batch.prefix_lens),
            "extend_lens": torch.tensor([len(t) for t in batch.new_token_ids]),
            "out_cache_loc": batch.out_cache_loc.cpu(),
            "lora": torch.tensor([-1 if r.lora_id is None else self.lora_names.index(r.lora_id) for r in reqs]),
            "temperature": _f64_bits([r.temperature for r in reqs]),
            "top_k": torch.tensor([r.top_k for r in reqs]),
            "top_p": _f64_bits([r.top_p for r in reqs]),
            "seed": torch.tensor([r.sampling_seed for r in reqs]),
            "new_req": torch.tensor([int(not r.launched) for r in reqs]),
            "mid_chunk": torch.tensor([int(m) for m in batch.mid_chunk]),  # its token is never used
        }
        if is_extend:
            fields["input_ids"] = torch.tensor([t for ids in batch.new_token_ids for t in ids])
        return fields

    def snapshot(self, inputs: dict[str, torch.Tensor]) -> None:
        """Part of the device's *read*: copy the batch's req-to-token rows (SGLang's forward takes the
        same snapshot before publishing its read-done event)."""
        idx = inputs["req_pool_indices"].to(self.req_to_token_pool.req_to_token.device)
        width = int((inputs["prefix_lens"] + inputs["extend_lens"]).max())
        inputs["rows"] = self.req_to_token_pool.req_to_token[idx, :width].clone()

    def take_extra(self) -> Any:
        """What the host gets besides the tokens (the last-token logits when the engine keeps them)."""
        extra, self.extra = self.extra, None
        return extra

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        mode = ForwardMode.EXTEND if int(inputs["mode"][0]) == EXTEND else ForwardMode.DECODE
        bs = len(inputs["req_pool_indices"])
        ext = inputs["extend_lens"].tolist()
        ids = inputs["input_ids"].tolist()
        new_ids, start = [], 0
        for e in ext:
            new_ids.append(ids[start:start + e])
            start += e
        loras = [None if i < 0 else self.lora_names[i] for i in inputs["lora"].tolist()]
        fb = ForwardBatch.build(mode, new_ids, list(range(bs)), inputs["prefix_lens"].tolist(),
                                inputs["out_cache_loc"], lora_ids=loras, device=self.device)
        rows = SimpleNamespace(req_to_token=inputs["rows"], size=bs,
                               max_context_len=self.req_to_token_pool.max_context_len)
        logits = self.model.forward(fb, rows, self.token_to_kv_pool)
        last = logits[fb.last_token_indices().to(logits.device)].float().cpu()
        self.extra = last if self.keep_logits else None
        temps, top_ks, top_ps, seeds, new = (inputs[k] for k in ("temperature", "top_k", "top_p", "seed", "new_req"))
        mid_chunk = inputs["mid_chunk"].bool().tolist()  # not sampled: the generator stays where it is
        temps, top_ps = temps.view(torch.float64).tolist(), top_ps.view(torch.float64).tolist()
        reqs = []
        for i, pool_idx in enumerate(inputs["req_pool_indices"].tolist()):
            if int(new[i]) or pool_idx not in self.sampling:
                self.sampling[pool_idx] = SimpleNamespace(temperature=temps[i], top_k=int(top_ks[i]), top_p=top_ps[i],
                                                          sampling_seed=int(seeds[i]), generator=None)
            reqs.append(self.sampling[pool_idx])
        return torch.tensor(ModelRunner.sample(last, reqs, mid_chunk), dtype=torch.int64, device=self.device)


def attach_backend(engine: Any, kind: str | None = None, *, war_barrier: bool | str = True,
                   adversarial: bool = False) -> DeviceBackend:
    """Run ``engine``'s scheduler on a device backend (``"cuda"``, ``"cpu-process"``, ``"cpu-thread"``,
    ``"in-process"``; default: cuda for a CUDA engine, else the worker process). The KV pool and the
    req-to-token table move to shared memory first, so the worker process writes what the engine reads."""
    kind = kind or ("cuda" if engine.device.type == "cuda" else "cpu-process")
    sched = engine.scheduler
    if kind == "in-process":
        sched.backend = make_backend(kind, sched.model_runner, device=engine.device)
        sched.war_barrier = war_barrier
        return sched.backend
    if kind == "cuda" and engine.device.type != "cuda":
        raise ValueError(f"device_backend='cuda' needs an engine on a CUDA device, the engine is on {engine.device}")
    if kind != "cuda" and engine.device.type != "cpu":
        raise ValueError(f"device_backend={kind!r} needs an engine on the CPU, the engine is on {engine.device}")
    if kind == "cpu-process":
        engine.req_to_token_pool.req_to_token.share_memory_()
        for t in list(engine.token_to_kv_pool.k_buffer) + list(engine.token_to_kv_pool.v_buffer):
            t.share_memory_()
    program = EngineProgram(engine.model, engine.req_to_token_pool, engine.token_to_kv_pool,
                            sorted(getattr(engine.model, "adapters", {}) or {}), keep_logits=sched.keep_logits)
    capacity = 2 * max(engine.max_prefill_tokens, engine.max_total_tokens) + 16 * engine.max_running_requests + 64
    backend = make_backend(kind, program, max_reqs=engine.req_to_token_pool.size, staging_capacity=capacity,
                           max_batch=engine.max_running_requests, adversarial=adversarial)
    sched.backend, sched.war_barrier = backend, war_barrier
    return backend
