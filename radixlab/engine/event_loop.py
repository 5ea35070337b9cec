"""SGLang's two event loops, ``event_loop_normal`` and ``event_loop_overlap``, written once (notebook 08).

A mixin over three scheduler steps (SGLang's names): ``get_next_batch_to_run`` → ``run_batch`` (launch
on the device backend: returns a ``Launch`` at once) → ``process_batch_result`` (waits for the tokens).
The engine's ``Scheduler`` and notebook 08's ``ToyScheduler`` both inherit it, so the loops the
notebook prints are the ones the engine runs. The normal loop processes each batch right after
launching it; the overlap loop launches batch N, then processes batch N−1 while N runs. One thread,
one loop, as in SGLang. Differences from SGLang, on purpose: no request receiving or idle self-checks;
a loop returns once the scheduler has no work instead of running forever; every step is recorded on a
``Timeline``.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from .device_backend import DeviceBackend, Launch
from .timeline import Timeline


class SchedulerStalled(RuntimeError):
    """Requests wait but nothing can run and nothing is in flight: a scheduler bug."""

    def __init__(self) -> None:
        super().__init__("scheduler stalled: requests wait but nothing can run (a bug)")


WAR_BARRIERS = (True, False, "full")  # wait for the read; no barrier; wait for the tokens


def check_war_barrier(value: Any) -> bool | str:
    """``value`` if it is one of ``WAR_BARRIERS``, else a ValueError naming ``war_barrier``.

    Checked by identity for the booleans, so that ``1``, ``"Full"`` or ``"read"`` are refused rather
    than silently read as the read barrier."""
    if not any(value is ok if isinstance(ok, bool) else value == ok for ok in WAR_BARRIERS):
        raise ValueError(f"war_barrier must be True (wait for the read), False (no barrier) or 'full' "
                         f"(wait for the tokens), got {value!r}")
    return value


class EventLoopMixin:
    """The two loops; a scheduler supplies the three steps, ``has_work`` and a ``backend``."""

    backend: DeviceBackend
    _war_barrier: bool | str = True
    timeline: Timeline | None = None

    @property
    def war_barrier(self) -> bool | str:
        """True: wait for the read; False: no barrier; ``"full"``: wait for the tokens."""
        return self._war_barrier

    @war_barrier.setter
    def war_barrier(self, value: bool | str) -> None:
        self._war_barrier = check_war_barrier(value)

    def event_loop_normal(self) -> None:
        """Schedule, launch, wait for the tokens, process: the device idles while the CPU works."""
        self._begin("normal")
        while self.has_work():
            t0 = self.timeline.now()
            batch = self.get_next_batch_to_run()  # 1. schedule
            if batch is None:
                raise SchedulerStalled()
            launch = self.run_batch(batch)  # 2. launch (the in-process backend runs the forward here)
            launch.record.sched = (t0, self.timeline.now())
            self._process(batch, launch)  # 3. wait for its tokens, then process them
        self._end()

    def event_loop_overlap(self) -> None:
        """Launch batch N, then process batch N−1 while N runs on the device."""
        self._begin("overlap")
        result_queue: deque[tuple[Any, Launch]] = deque()
        while self.has_work() or result_queue:
            t0 = self.timeline.now()
            batch = self.get_next_batch_to_run()  # 1. schedule N: its decode inputs are futures
            if batch is not None:
                launch = self.run_batch(batch)  # 2. launch N; returns at once
                self._apply_war_barrier(launch)  # 3. N has read its inputs before the CPU writes again
                launch.record.sched = (t0, self.timeline.now())
                result_queue.append((batch, launch))
            elif not result_queue:
                raise SchedulerStalled()
            while len(result_queue) > (batch is not None):  # 4. process N−1 while N runs
                self._process(*result_queue.popleft())
        self._end()

    def _apply_war_barrier(self, launch: Launch) -> None:
        """The write-after-read barrier, right after each launch, where SGLang applies it.

        The next CPU steps overwrite what batch N's device read still needs: the staging buffer (the
        next launch) and the req-to-token rows (result processing, the next schedule). So the CPU
        waits until the device has read N's inputs; not until N has finished, so overlap survives.
        SGLang has no reused host buffer (fresh pinned tensors per batch), and its later writes are
        device ops, so its barrier blocks no Python thread (notebook 08's follow-up asks what waits
        instead); ours are host writes (shared or pinned memory), so the host waits.
        ``war_barrier="full"`` waits for N's tokens instead: safe, but the overlap is gone (notebook 08).
        """
        if self.war_barrier == "full":
            launch.result()
        elif self.war_barrier:
            launch.wait_inputs_read()

    def _process(self, batch: Any, launch: Launch) -> None:
        t0 = self.timeline.now()
        self.process_batch_result(batch, launch)
        launch.record.proc = (t0, self.timeline.now())

    def _begin(self, loop: str) -> None:
        self.timeline = self.backend.new_timeline(loop)

    def _end(self) -> None:
        self.timeline.end = self.timeline.now()
        self.on_idle()

    def on_idle(self) -> None:
        """Called when a loop returns (SGLang: ``on_idle``); nothing to do by default."""

    # -- what a scheduler implements -------------------------------------------------------------

    def has_work(self) -> bool:
        raise NotImplementedError

    def get_next_batch_to_run(self) -> Any:
        raise NotImplementedError

    def run_batch(self, batch: Any) -> Launch:
        raise NotImplementedError

    def process_batch_result(self, batch: Any, launch: Launch) -> None:
        raise NotImplementedError
