"""``OverlapScheduler``: engine8's ``Scheduler`` driven through a device backend, so that the
overlap event loop can launch batch N and process batch N−1 while N runs (notebook 08).

What changes against the normal scheduler, and why (each mirrors SGLang v0.5.17):

1. **Future token ids.** A decode batch is scheduled before the previous step's tokens are on the
   host, so its input ids are not staged: the device reads them from ``output_tokens_buf
   [req_pool_idx]`` (``FutureMap``), where the previous step stashed them.
2. **Allocation without tokens.** Decode slots are allocated from the request's *allocated*
   length (prompt + every launched step), not from ``len(output_ids)``; ``fill_ids`` catches up
   when a result is processed.
3. **Snapshots.** The queue keeps what a batch was at launch (requests, positions, which request
   was mid-chunk), as SGLang's ``result_queue`` keeps ``batch.copy()``: the running batch moves on.
4. **One wasted step on EOS.** A request that stops on EOS in step N−1 was already launched in step
   N; its step-N slot is freed and its token dropped. SGLang does the same: its result processor
   skips a finished request ("all the over-allocated tokens will be freed in ``release_kv_cache``",
   ``managers/scheduler_components/batch_result_processor.py``), and ``release_kv_cache``
   (``mem_cache/common.py``) frees the row from ``kv_committed_len`` to ``kv_allocated_len``.
5. **The WAR barrier.** Right after each launch (``Scheduler._apply_war_barrier``): the host waits
   until the device has read the staging buffer and snapshotted the req-to-token rows, because the
   next CPU steps write both (result processing rewrites rows in ``cache_unfinished_req``, the
   next schedule allocates rows).

The engine's default is ``disable_overlap_schedule=True`` (SGLang's default is overlap on). On a GPU overlap
is free throughput; in this course the engine is first a thing to inspect: the normal loop runs the model in
the caller's process (step into it, patch it, read every tensor), and with the tiny model the device step is
long against ~1–2 ms of scheduler Python, so overlap buys little (``bench overlap`` part 3). One flag turns it on.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from ..model.forward_batch import ForwardBatch, ForwardMode
from ..mem_cache import alloc_at
from .device_backend import DeviceBackend, Launch
from .model_runner import ModelRunner
from .schedule_batch import Req, ScheduleBatch
from .scheduler import Scheduler
from .timeline import Timeline

EXTEND, DECODE = 1, 2


def _f64_bits(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).view(torch.int64)


class EngineProgram:
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


@dataclass
class LaunchedBatch:
    """What a batch was when it was launched (the result queue's ``batch.copy()``)."""

    forward_mode: ForwardMode
    reqs: list[Req]
    positions: list[int]  # decode: each request's position this step; extend: its new seq_len - 1
    skip: list[bool]  # the request was mid-chunk: its token means nothing
    num_new_tokens: int


class OverlapScheduler(Scheduler):
    """The same scheduling decisions as ``Scheduler``; batches run on a ``DeviceBackend``."""

    def __init__(self, *args: Any, backend: DeviceBackend, war_barrier: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.backend = backend
        self.war_barrier = war_barrier
        self.lora_names: list[str] = backend.program.lora_names
        self._alloc_len: dict[int, int] = {}  # id(req) -> row positions allocated (prompt + launched steps)
        self._seen: set[int] = set()  # requests whose sampling state the device already has
        self._pending: dict[int, int] = {}  # id(req) -> launched steps whose token is not processed yet
        self._step = 0
        self.timeline: Timeline | None = None

    # -- 1. schedule: Scheduler.get_next_batch_to_run, with decode batches built from futures --------

    def _prepare_for_decode(self, running: ScheduleBatch) -> ScheduleBatch | None:
        """A decode batch of the running requests that still need a token; slots from the allocated length."""
        reqs = [r for r in running.reqs if self._launched_tokens(r) < r.max_new_tokens]
        if not reqs:
            return None
        batch = ScheduleBatch(reqs, self.tree_cache, ForwardMode.DECODE)
        batch.prefix_lens = [self._alloc_len.get(id(r), r.seq_len) for r in reqs]
        batch.new_token_ids = [[-1] for _ in reqs]  # futures: resolved on the device
        batch.out_cache_loc = torch.cat([self._alloc_one(r, p, batch) for r, p in zip(reqs, batch.prefix_lens)])
        self.stats.evicted_tokens += batch.evicted_tokens
        return batch

    def _launched_tokens(self, req: Req) -> int:
        """Tokens the request will have once every launched step is processed."""
        return len(req.output_ids) + self._pending.get(id(req), 0)

    def _alloc_one(self, req: Req, pos: int, batch: ScheduleBatch) -> torch.Tensor:
        """The slot of position ``pos`` (the allocated length: ahead of ``req.seq_len`` while tokens are in flight)."""
        evicted: list[int] = []
        if alloc_at(self.tree_cache, req.req_pool_idx, pos, 1, on_evict=evicted.append) is None:
            raise RuntimeError(f"KV pool exhausted while decoding request {req.rid!r} (a bug: admission reserves it)")
        batch.evicted_tokens += sum(evicted)
        self._alloc_len[id(req)] = pos + 1
        return self.req_to_token_pool.req_to_token[req.req_pool_idx, pos:pos + 1]

    # -- 2. launch ------------------------------------------------------------------------------

    def run_batch(self, batch: ScheduleBatch) -> Launch:
        is_extend = batch.forward_mode.is_extend()
        reqs = list(batch.reqs)
        if is_extend:
            for r in reqs:
                self._alloc_len[id(r)] = r.seq_len
        ext = [len(t) for t in batch.new_token_ids]
        fields = {
            "mode": torch.tensor([EXTEND if is_extend else DECODE]),
            "req_pool_indices": torch.tensor([r.req_pool_idx for r in reqs]),
            "prefix_lens": torch.tensor(batch.prefix_lens),
            "extend_lens": torch.tensor(ext),
            "out_cache_loc": batch.out_cache_loc.cpu(),
            "lora": torch.tensor([-1 if r.lora_id is None else self._lora_index(r.lora_id) for r in reqs]),
            "temperature": _f64_bits([r.temperature for r in reqs]),
            "top_k": torch.tensor([r.top_k for r in reqs]),
            "top_p": _f64_bits([r.top_p for r in reqs]),
            "seed": torch.tensor([r.sampling_seed for r in reqs]),
            "new_req": torch.tensor([int(id(r) not in self._seen) for r in reqs]),
            "mid_chunk": torch.tensor([int(r is self.chunked_req) for r in reqs]),
        }
        if is_extend:
            fields["input_ids"] = torch.tensor([t for ids in batch.new_token_ids for t in ids])
        self._seen.update(id(r) for r in reqs)
        for r in reqs:
            if r is not self.chunked_req:
                self._pending[id(r)] = self._pending.get(id(r), 0) + 1
        step = self._step
        self._step += 1
        layout = self.backend.write_inputs(step, fields)
        launch = self.backend.launch(step, layout, len(reqs), resolve_future=not is_extend)
        launch.record.kind = "extend" if is_extend else "decode"
        positions = [p + e - 1 for p, e in zip(batch.prefix_lens, ext)]
        launch.extra["batch"] = LaunchedBatch(batch.forward_mode, reqs, positions,
                                              [r is self.chunked_req for r in reqs], sum(ext))
        return launch

    def apply_war_barrier(self, launch: Launch) -> None:
        """SGLang's ``_apply_war_barrier``, called right after each launch in the overlap loop."""
        if self.war_barrier:
            launch.wait_inputs_read()

    def _lora_index(self, name: str) -> int:
        return self.lora_names.index(name)  # the engine checked that the adapter exists

    # -- 3. process -----------------------------------------------------------------------------

    def process_batch_result(self, batch: Any, launch: Launch) -> None:
        snap: LaunchedBatch = launch.extra["batch"]
        tokens = launch.result().tolist()
        now = time.perf_counter()
        if snap.forward_mode.is_extend():
            self.stats.extend_batches += 1
            self.stats.prefill_tokens += snap.num_new_tokens
        else:
            self.stats.decode_batches += 1
            self.stats.decode_tokens += len(snap.reqs)
        self.stats.max_running = max(self.stats.max_running, len(self.running_batch.reqs))
        for i, (req, token, pos, skip) in enumerate(zip(snap.reqs, tokens, snap.positions, snap.skip)):
            if skip:
                continue  # mid-prompt chunk
            if req.is_done():
                continue  # stopped on EOS one step earlier: this step was wasted, its slot is gone
            self._pending[id(req)] -= 1
            if snap.forward_mode.is_decode():
                req.fill_ids = req.all_ids[:pos + 1]  # the KV of position pos is now computed
            if req.first_token_time is None:
                req.first_token_time = now
            if len(req.output_ids) < req.max_new_tokens:
                req.output_ids.append(token)
                if self.keep_logits:
                    req.output_logits.append(launch.extra["logits"][i].clone())
            req.check_finished(self.eos_token_ids)
            if req.is_done():
                req.finished_time = now
                self.release(req)
            elif snap.forward_mode.is_extend():
                self.tree_cache.cache_unfinished_req(req)

    def release(self, req: Req) -> None:
        """As ``Scheduler.release``, plus the slots of steps launched after the request stopped."""
        extra = self._wasted_pages(req, self._alloc_len.pop(id(req), req.seq_len))
        super().release(req)
        if extra:
            self.token_to_kv_pool_allocator.free(extra)
        self._seen.discard(id(req))
        self._pending.pop(id(req), None)

    def _wasted_pages(self, req: Req, allocated: int) -> list[int]:
        """First slots of the pages of ``req``'s row past ``seq_len`` up to ``allocated``: steps launched
        after it stopped (the first partial page goes with the tail, freed by ``cache_finished_req``)."""
        page = self.token_to_kv_pool_allocator.page_size
        row = self.req_to_token_pool.req_to_token[req.req_pool_idx]
        return [int(row[p]) for p in range(req.seq_len, allocated) if p % page == 0]

    def abort_all(self) -> None:
        """After an error: wait for the device, free slots of launched steps, then drop every request."""
        try:
            self.backend.synchronize()
        except Exception:
            pass
        for req in self.live_reqs():
            if req.req_pool_idx is not None:
                extra = self._wasted_pages(req, self._alloc_len.get(id(req), req.seq_len))
                if extra:
                    self.token_to_kv_pool_allocator.free(extra)
        self._alloc_len.clear()
        self._pending.clear()
        self._seen.clear()
        super().abort_all()

    # -- the loops ------------------------------------------------------------------------------

    def _run(self, loop: str) -> None:
        self.timeline = self.backend.new_timeline(loop)
        tl = self.timeline
        result_queue: deque[Launch] = deque()
        while self.has_work() or result_queue:
            t0 = tl.now()
            batch = self.get_next_batch_to_run()
            if batch is not None:
                launch = self.run_batch(batch)
                if loop == "overlap":
                    self.apply_war_barrier(launch)
                launch.record.sched = (t0, tl.now())
                result_queue.append(launch)
            elif not result_queue:
                raise RuntimeError("scheduler stalled: requests wait but nothing can run (a bug)")
            keep = 1 if (loop == "overlap" and batch is not None) else 0
            while len(result_queue) > keep:
                prev = result_queue.popleft()
                t2 = tl.now()
                self.process_batch_result(None, prev)
                prev.record.proc = (t2, tl.now())
        tl.end = tl.now()
        self.last_batch = None

    def event_loop_normal(self) -> None:
        """schedule → launch → wait → process, on the backend (the fair baseline of the overlap loop)."""
        self._run("normal")

    def event_loop_overlap(self) -> None:
        """Launch batch N, apply the WAR barrier, process batch N−1 while N runs (SGLang's loop)."""
        self._run("overlap")


def attach_backend(engine: Any, kind: str | None = None, *, war_barrier: bool = True,
                   adversarial: bool = False) -> DeviceBackend:
    """Run ``engine``'s scheduler on a device backend (``"cuda"``, ``"cpu-process"``, ``"cpu-thread"``;
    default: cuda for a CUDA engine, else the worker process). The KV pool and the req-to-token table
    move to shared memory first, so the worker process writes what the engine reads."""
    from .device_backend import make_backend

    kind = kind or ("cuda" if engine.device.type == "cuda" else "cpu-process")
    if kind == "cuda" and engine.device.type != "cuda":
        raise ValueError(f"device_backend='cuda' needs an engine on a CUDA device, the engine is on {engine.device}")
    if kind != "cuda" and engine.device.type != "cpu":
        raise ValueError(f"device_backend={kind!r} needs an engine on the CPU, the engine is on {engine.device}")
    if kind == "cpu-process":
        engine.req_to_token_pool.req_to_token.share_memory_()
        for t in list(engine.token_to_kv_pool.k_buffer) + list(engine.token_to_kv_pool.v_buffer):
            t.share_memory_()
    old = engine.scheduler
    program = EngineProgram(engine.model, engine.req_to_token_pool, engine.token_to_kv_pool,
                            sorted(getattr(engine.model, "adapters", {}) or {}), keep_logits=old.keep_logits)
    capacity = 2 * max(engine.max_prefill_tokens, engine.max_total_tokens) + 16 * engine.max_running_requests + 64
    backend = make_backend(kind, program, max_reqs=engine.req_to_token_pool.size, staging_capacity=capacity,
                           max_batch=engine.max_running_requests, adversarial=adversarial)
    engine.scheduler = OverlapScheduler(old.model_runner, old.tree_cache, old.policy,
                                        max_running_requests=old.max_running_requests,
                                        chunked_prefill_size=old.chunked_prefill_size,
                                        max_prefill_tokens=old.max_prefill_tokens, eos_token_ids=old.eos_token_ids,
                                        keep_logits=old.keep_logits, backend=backend, war_barrier=war_barrier)
    return backend
