"""The device backends by name (``make_backend``), and the in-process one, the normal loop's default.

``InProcessBackend`` runs the program in the caller's process, at launch: a ``Launch`` comes back
finished, so nothing overlaps, and a student can step from ``Scheduler.run_batch`` straight into the
model's forward and read every tensor. For the engine its program is the ``ModelRunner``, which takes
the ``ScheduleBatch`` itself (nothing is staged); decode inputs that are still futures (the overlap loop
on this backend) are resolved from its own ``FutureMap``. The other backends run the program elsewhere:
``cpu_worker`` (a process, or a thread for comparison) and ``cuda_backend`` (CUDA streams).
SGLang has no in-process variant: its normal loop launches on the GPU as well.
"""

from __future__ import annotations

from typing import Any

import torch

from .cpu_worker import CPUProcessBackend, CPUThreadBackend
from .cuda_backend import CUDABackend
from .device_backend import FUTURE, DeviceBackend, Launch, unpack


class InProcessBackend(DeviceBackend):
    """The device is this process: each launch runs ``program.forward`` before ``launch`` returns."""

    kind = "in-process"

    def __init__(self, program: Any, *, device: torch.device | str = "cpu", **kwargs: Any) -> None:
        kwargs.setdefault("max_reqs", 1 << 20)
        super().__init__(program, **kwargs)
        self.device = torch.device(device)
        self._started = False
        self.future: dict[int, int] = {}  # req_pool_idx -> the token its last step sampled

    def launch_batch(self, step: int, batch: Any) -> Launch:
        """Run ``program.forward(batch)`` (``ModelRunner.forward``) now; the launch is done on return."""
        if self._closed:
            raise RuntimeError("this device backend was shut down")
        for i, r in enumerate(batch.reqs):  # futures: the previous step's token
            if batch.new_token_ids[i] == [FUTURE]:
                batch.new_token_ids[i] = [self.future[r.req_pool_idx]]
        rec = self.timeline.record(step)
        rec.batch_size = batch.batch_size()
        rec.launch = t0 = self.timeline.now()
        result = self.program.forward(batch)
        rec.dev = (t0, self.timeline.now())
        launch = Launch(step, batch.batch_size(), (), 0, rec, self, extra={"logits": result.logits})
        for r, t in zip(batch.reqs, result.next_token_ids):
            self.future[r.req_pool_idx] = t
        self._finish(launch, torch.tensor(result.next_token_ids, dtype=torch.int64), 0, step)
        return launch

    # -- the generic launch (a toy program that takes staged fields) ----------------------------

    def _ensure_started(self) -> None:
        if not self._started:
            self.program.setup(self.device)
            self._started = True

    def _stage(self, image: torch.Tensor) -> None:
        self._image = image

    def _launch(self, launch: Launch, resolve_future: bool) -> None:
        inputs = unpack(self._image, launch.layout)
        idx = inputs["req_pool_indices"].tolist()
        if resolve_future:
            inputs["input_ids"] = torch.tensor([self.future[i] for i in idx], dtype=torch.int64)
        t0 = self.timeline.now()
        tokens = self.program.forward(inputs).to(torch.int64).cpu()
        launch.record.dev = (t0, self.timeline.now())
        self.future.update(zip(idx, tokens.tolist()))
        launch.tokens, launch.inputs_read = tokens, True

    def _wait_inputs_read(self, launch: Launch) -> None:
        launch.inputs_read = True

    def _wait_done(self, launch: Launch) -> None:
        self._finish(launch, launch.tokens, launch.written_checksum, launch.step)

    def _shutdown(self) -> None:
        self.future.clear()


def make_backend(kind: str, program: Any, **kwargs: Any) -> DeviceBackend:
    """``"in-process"``, ``"cuda"``, ``"cpu-process"`` or ``"cpu-thread"`` (``"cpu"`` means ``"cpu-process"``)."""
    kinds = {"in-process": InProcessBackend, "cpu": CPUProcessBackend, "cpu-process": CPUProcessBackend,
             "cpu-thread": CPUThreadBackend, "cuda": CUDABackend}
    if kind not in kinds:
        raise ValueError(f"backend kind must be 'in-process', 'cuda', 'cpu-process' or 'cpu-thread', got {kind!r}")
    return kinds[kind](program, **kwargs)
