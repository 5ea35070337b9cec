"""One device interface: how a scheduler launches a batch and gets its tokens back (notebook 08).

A launch writes the batch's integer inputs into one reused **staging buffer** and returns a ``Launch``
at once; the device runs launches in order (a stream): it (1) reads the staging buffer (what the WAR
barrier, ``Launch.wait_inputs_read``, waits for), (2) resolves *future* token ids from
``output_tokens_buf[req_pool_idx]`` (SGLang's ``FutureMap``, ``managers/overlap_utils.py``), (3) runs
the program's forward and stashes the sampled ids there, (4) copies them to the host (``Launch.result``).
Each launch carries a checksum of what the host wrote; the device reports what it read, so a WAR hazard
marks the step ``corrupted``. Implementations (``backends.make_backend``): ``InProcessBackend`` (the
model runs in the caller, at launch), ``cpu_worker`` (a worker process or thread), ``cuda_backend``.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import torch

from .timeline import StepRecord, Timeline

Layout = tuple[tuple[str, int, int], ...]
"""Where each input field sits in the staging buffer: ``(name, offset, length)``."""

FUTURE = -1
"""A decode input id the host does not know yet: the token the request's previous step samples."""
HEADER = "step"  # every launch writes its own step number first: a corrupted read says whose inputs it saw


class WorkerDiedError(RuntimeError):
    """The device's worker process died (killed, crashed) or stopped answering: what was in flight is
    lost. The backend forgets it; its next launch starts a fresh worker (the shared pools stay)."""


class WorkerTimeoutError(WorkerDiedError):
    """The worker sent nothing for ``watchdog_timeout`` seconds while the host waited: it was stopped."""


class DeviceProgram:
    """What runs on the device: built once there (``setup``), then one ``forward`` per launch.

    ``forward`` gets the batch's input fields as device tensors (``input_ids`` already resolved
    from the future map for decode batches) and returns the sampled next token id per request.
    ``snapshot`` (part of the read: copy what the host may rewrite once the barrier passed) and
    ``take_extra`` (what the host gets besides the tokens) do nothing unless a program needs them.
    A program must be picklable (the CPU worker may be started with ``spawn``).
    """

    def setup(self, device: torch.device) -> None:
        raise NotImplementedError

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def snapshot(self, inputs: dict[str, torch.Tensor]) -> None:
        return None

    def take_extra(self) -> Any:
        return None

    def stage(self, batch: Any) -> dict[str, torch.Tensor]:
        """The host side of ``DeviceBackend.launch_batch``: a ``ScheduleBatch`` as staged fields."""
        raise NotImplementedError(f"{type(self).__name__} takes staged fields, not a ScheduleBatch")


def checksum(values: torch.Tensor) -> int:
    """Position-weighted sum of int64 values: any overwrite of a staged field changes it."""
    v = values.to(torch.int64).flatten()
    w = torch.arange(1, v.numel() + 1, dtype=torch.int64, device=v.device)
    return int((v * w).sum().item()) if v.numel() else 0


def pack(step: int, fields: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Layout]:
    """The staging image of one batch: the step header, then every field, as one int64 vector."""
    if HEADER in fields:
        raise ValueError(f"fields must not contain the reserved name {HEADER!r}")
    parts = [torch.tensor([step], dtype=torch.int64)]
    layout = [(HEADER, 0, 1)]
    offset = 1
    for name, t in fields.items():
        t = torch.as_tensor(t).to(device="cpu", dtype=torch.int64).flatten()
        layout.append((name, offset, t.numel()))
        parts.append(t)
        offset += t.numel()
    return torch.cat(parts), tuple(layout)


def unpack(image: torch.Tensor, layout: Layout) -> dict[str, torch.Tensor]:
    return {name: image[off:off + n] for name, off, n in layout if name != HEADER}


@dataclass
class Launch:
    """A batch that was launched: the handle the scheduler keeps until it processes the result."""

    step: int
    batch_size: int
    layout: Layout
    written_checksum: int
    record: StepRecord
    backend: "DeviceBackend"
    inputs_read: bool = False
    done: bool = False
    tokens: torch.Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def wait_inputs_read(self) -> None:
        """The WAR barrier: return once the device has consumed this launch's staging buffer, so the
        CPU may overwrite it with the next batch."""
        self.backend._wait_inputs_read(self)

    def result(self) -> torch.Tensor:
        """Block until the sampled token ids are on the host; returns them (int64, one per request)."""
        if not self.done:
            self.backend._wait_done(self)
        assert self.tokens is not None
        return self.tokens


class DeviceBackend(abc.ABC):
    """The device interface: ``write_inputs`` + ``launch`` (non-blocking), ``Launch.wait_inputs_read``
    (the barrier), ``Launch.result`` (the sync). Records every launch in ``timeline``."""

    kind = "abstract"

    def __init__(self, program: DeviceProgram, *, max_reqs: int, staging_capacity: int = 1 << 16,
                 max_batch: int = 4096, adversarial: bool = False) -> None:
        for name, value in (("max_reqs", max_reqs), ("staging_capacity", staging_capacity),
                            ("max_batch", max_batch)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.program = program
        self.max_reqs = max_reqs
        self.staging_capacity = staging_capacity
        self.max_batch = max_batch
        self.adversarial = adversarial
        self.timeline = Timeline(loop="?", backend=self.kind)
        self._written: tuple[int, int, float] | None = None  # (step, checksum, when) staged, not launched yet
        self._in_flight: dict[int, Launch] = {}
        self._closed = False

    # -- the scheduler's side -----------------------------------------------------------------

    def new_timeline(self, loop: str) -> Timeline:
        self.timeline = Timeline(loop=loop, backend=self.kind)
        return self.timeline

    def write_inputs(self, step: int, fields: dict[str, torch.Tensor]) -> Layout:
        """Copy one batch's inputs into the reused staging buffer (the write of the WAR hazard)."""
        if self._closed:
            raise RuntimeError("this device backend was shut down")
        image, layout = pack(step, fields)
        if image.numel() > self.staging_capacity:
            raise ValueError(f"batch inputs need {image.numel()} staging slots, staging_capacity is "
                             f"{self.staging_capacity}")
        self._ensure_started()
        self._stage(image)
        self._written = (step, checksum(image), self.timeline.now())
        return layout

    def launch(self, step: int, layout: Layout, batch_size: int, resolve_future: bool) -> Launch:
        """Start the batch staged under ``step``; returns immediately. ``resolve_future``: the input
        ids are last step's sampled tokens, read on the device from the future map."""
        if self._written is None or self._written[0] != step:
            raise RuntimeError(f"launch({step}) without write_inputs({step}) first")
        if not 0 < batch_size <= self.max_batch:
            raise ValueError(f"batch_size must be in 1..{self.max_batch}, got {batch_size}")
        rec = self.timeline.record(step)
        rec.batch_size = batch_size
        rec.write = self._written[2]
        launch = Launch(step, batch_size, layout, self._written[1], rec, self)
        self._written = None
        rec.launch = self.timeline.now()
        self._launch(launch, resolve_future)
        self._in_flight[step] = launch
        return launch

    def launch_batch(self, step: int, batch: Any) -> Launch:
        """The engine's entry: stage a ``ScheduleBatch`` through the program (``program.stage``) and launch
        it; a decode batch's input ids are futures, resolved on the device."""
        layout = self.write_inputs(step, self.program.stage(batch))
        return self.launch(step, layout, batch.batch_size(), resolve_future=batch.forward_mode.is_decode())

    def synchronize(self) -> None:
        """Wait for every launched batch."""
        for launch in list(self._in_flight.values()):
            launch.result()

    def restart(self) -> None:
        """Rebuild the device side from the program as it is now (nothing may be in flight). A device
        in this process already sees the program's model as it is: nothing to do."""

    def shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            self._shutdown()

    def __enter__(self) -> "DeviceBackend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- helpers for implementations ----------------------------------------------------------

    def _finish(self, launch: Launch, tokens: torch.Tensor, consumed_checksum: int, consumed_step: int) -> None:
        launch.tokens = tokens
        launch.done = True
        launch.inputs_read = True
        launch.record.consumed_step = consumed_step
        launch.record.corrupted = consumed_checksum != launch.written_checksum
        self._in_flight.pop(launch.step, None)

    # -- what a backend implements ------------------------------------------------------------

    @abc.abstractmethod
    def _ensure_started(self) -> None: ...

    @abc.abstractmethod
    def _stage(self, image: torch.Tensor) -> None: ...

    @abc.abstractmethod
    def _launch(self, launch: Launch, resolve_future: bool) -> None: ...

    @abc.abstractmethod
    def _wait_inputs_read(self, launch: Launch) -> None: ...

    @abc.abstractmethod
    def _wait_done(self, launch: Launch) -> None: ...

    @abc.abstractmethod
    def _shutdown(self) -> None: ...
