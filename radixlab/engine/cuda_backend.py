"""The CUDA device backend: a forward stream, a copy stream, events, pinned buffers (notebook 08).

Per launch, on the forward stream: a ``non_blocking`` H2D copy of the pinned staging buffer (the
device's read), the future-map gather, the program's snapshot, an ``inputs_read`` event, the forward,
the future-map stash; the copy stream then copies the sampled ids to a pinned host slot, overlapping
the next forward, as SGLang's ``run_batch`` does. ``Launch.wait_inputs_read`` synchronizes on the
``inputs_read`` event: the host writes the pinned staging buffer itself, so the host waits, where
SGLang's barrier makes its schedule stream wait (``Scheduler._apply_war_barrier`` explains both).
``adversarial=True`` enqueues ``torch.cuda._sleep`` before each read, so a missing barrier always loses.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from .device_backend import DeviceBackend, DeviceProgram, Launch, checksum

RING = 4
SLEEP_CYCLES = 50_000_000  # ≈ 25–50 ms at GPU clocks: far longer than the CPU's next write


def _device_checksum(image: torch.Tensor) -> torch.Tensor:
    w = torch.arange(1, image.numel() + 1, dtype=torch.int64, device=image.device)
    return (image * w).sum().reshape(1)


class CUDABackend(DeviceBackend):
    kind = "cuda"

    def __init__(self, program: DeviceProgram, *, device: str | torch.device = "cuda", **kwargs: Any) -> None:
        super().__init__(program, **kwargs)
        if not torch.cuda.is_available():
            raise RuntimeError("the cuda backend needs a CUDA device; use 'cpu-process' on this machine")
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"device must be a CUDA device, got {device}")
        self.device = device if device.index is not None else torch.device("cuda", torch.cuda.current_device())
        self._started = False

    def _ensure_started(self) -> None:
        if self._started:
            return
        torch.cuda.set_device(self.device)
        self.program.setup(self.device)
        self.forward_stream = torch.cuda.Stream(self.device)
        self.copy_stream = torch.cuda.Stream(self.device)
        self.staging = torch.zeros(self.staging_capacity, dtype=torch.int64).pin_memory()
        # results: sampled ids + [checksum, consumed step] of what the device read
        self.results = torch.zeros(RING, self.max_batch + 2, dtype=torch.int64).pin_memory()
        self.future = torch.zeros(self.max_reqs, dtype=torch.int64, device=self.device)
        # one anchor event ↔ one host time, to put device events on the host clock
        self._anchor = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(self.device)
        self._anchor.record(torch.cuda.current_stream(self.device))
        torch.cuda.synchronize(self.device)
        self._anchor_host = time.perf_counter()
        self._started = True

    def _stage(self, image: torch.Tensor) -> None:
        self.staging[:image.numel()].copy_(image)

    def _event(self) -> torch.cuda.Event:
        return torch.cuda.Event(enable_timing=True)

    def _launch(self, launch: Launch, resolve_future: bool) -> None:
        if len(self._in_flight) >= RING - 1:
            raise RuntimeError(f"at most {RING - 1} launches may be in flight; process a result first")
        n = launch.layout[-1][1] + launch.layout[-1][2]
        ev = {k: self._event() for k in ("read0", "read1", "dev1", "copy1")}
        # the forward stream sees everything the scheduler enqueued so far (SGLang:
        # forward_stream.wait_stream(schedule_stream)), e.g. req-to-token writes
        self.forward_stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.forward_stream), torch.inference_mode():
            if self.adversarial:
                torch.cuda._sleep(SLEEP_CYCLES)
            ev["read0"].record()
            image = self.staging[:n].to(self.device, non_blocking=True)  # 1. the device reads the inputs
            inputs = {name: image[off:off + k] for name, off, k in launch.layout if name != "step"}
            if resolve_future:  # 2. future token ids, resolved on the device
                inputs["input_ids"] = self.future[inputs["req_pool_indices"]]
            self.program.snapshot(inputs)  # e.g. the engine's req-to-token rows
            ev["read1"].record()
            tokens = self.program.forward(inputs).to(torch.int64)  # 3. forward, then stash
            self.future[inputs["req_pool_indices"]] = tokens
            out = torch.cat([tokens, _device_checksum(image), image[:1]])
            launch.extra["device_extra"] = self.program.take_extra()
            ev["dev1"].record()
        self.copy_stream.wait_event(ev["dev1"])
        slot = self.results[launch.step % RING]
        with torch.cuda.stream(self.copy_stream), torch.inference_mode():  # 4. D2H on the copy stream
            slot[:launch.batch_size + 2].copy_(out, non_blocking=True)
            ev["copy1"].record()
        out.record_stream(self.copy_stream)
        image.record_stream(self.forward_stream)
        launch.extra["events"] = ev

    def _wait_inputs_read(self, launch: Launch) -> None:
        if launch.inputs_read:
            return
        t0 = self.timeline.now()
        launch.extra["events"]["read1"].synchronize()
        launch.inputs_read = True
        launch.record.barrier = (t0, self.timeline.now())

    def _wait_done(self, launch: Launch) -> None:
        t0 = self.timeline.now()
        ev = launch.extra["events"]
        ev["copy1"].synchronize()
        launch.record.wait = (t0, self.timeline.now())
        row = self.results[launch.step % RING, :launch.batch_size + 2].clone()
        tokens, got_sum, consumed = row[:launch.batch_size], int(row[-2]), int(row[-1])
        host = self._host_time
        rec = launch.record
        rec.read = (host(ev["read0"]), host(ev["read1"]))
        rec.dev = (host(ev["read1"]), host(ev["dev1"]))
        rec.copy = (host(ev["dev1"]), host(ev["copy1"]))
        if launch.extra.get("device_extra") is not None:
            launch.extra["logits"] = launch.extra.pop("device_extra").cpu()
        self._finish(launch, tokens, got_sum, consumed)

    def _host_time(self, event: torch.cuda.Event) -> float:
        return self._anchor_host + self._anchor.elapsed_time(event) / 1e3 - self.timeline.t0

    def _shutdown(self) -> None:
        if self._started:
            torch.cuda.synchronize(self.device)


__all__ = ["CUDABackend", "checksum"]
