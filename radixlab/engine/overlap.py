"""The two event loops of notebook 08: ``event_loop_normal`` and ``event_loop_overlap``.

Both drive any scheduler with SGLang's three-step shape:

* ``get_next_batch_to_run()`` → a batch, or ``None`` when nothing is left to run;
* ``run_batch(batch)`` → a ``Launch`` (the batch is *launched*, not finished: the result is a future);
* ``process_batch_result(batch, launch)`` → waits for ``launch.result()`` and updates the requests.

The normal loop (SGLang ``Scheduler.event_loop_normal``) processes each batch right after launching
it, so the device idles while the CPU processes results and schedules the next batch. The overlap
loop (``Scheduler.event_loop_overlap``) keeps a ``result_queue``: it launches batch N, *then*
processes batch N−1's results while N runs, and only then schedules N+1. It is one thread and one
loop with deferred result processing, not two threads. Batch N+1 can be scheduled before N's tokens
are known because its input ids are read on the device from the future map (``device_backend``).

SGLang applies the WAR barrier right after each launch (``_apply_war_barrier``, a stream-side wait
that costs the host nothing); here the barrier is a host wait inside ``run_batch`` just before the
staging buffer is overwritten (exercise 08.1): the first moment it is needed, so the host waits least.

Differences from SGLang, on purpose: no request receiving, idle self-checks, grammar or speculative
paths; the loops return when the scheduler has nothing left instead of running forever.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from .device_backend import Launch
from .timeline import Timeline


class LoopScheduler(Protocol):
    def get_next_batch_to_run(self) -> Any: ...

    def run_batch(self, batch: Any) -> Launch: ...

    def process_batch_result(self, batch: Any, launch: Launch) -> None: ...


def event_loop_normal(scheduler: LoopScheduler, timeline: Timeline) -> None:
    """schedule → launch → wait → process, one batch at a time."""
    while True:
        t0 = timeline.now()
        # 1. schedule the next batch (radix match, allocation, batch building)
        batch = scheduler.get_next_batch_to_run()
        if batch is None:
            break
        # 2. launch it on the device
        launch = scheduler.run_batch(batch)
        launch.record.sched = (t0, timeline.now())
        # 3. wait for its tokens and process them: the device idles from here to the next launch
        t2 = timeline.now()
        scheduler.process_batch_result(batch, launch)
        launch.record.proc = (t2, timeline.now())
    timeline.end = timeline.now()


def event_loop_overlap(scheduler: LoopScheduler, timeline: Timeline) -> None:
    """Launch batch N, then process batch N−1 while N runs on the device."""
    result_queue: deque[tuple[Any, Launch]] = deque()
    while True:
        t0 = timeline.now()
        # 1. schedule batch N: its decode inputs are futures, the device resolves them
        batch = scheduler.get_next_batch_to_run()
        # 2. launch batch N (run_batch waits at the WAR barrier before reusing the staging buffer)
        if batch is not None:
            launch = scheduler.run_batch(batch)
            launch.record.sched = (t0, timeline.now())
            result_queue.append((batch, launch))
        # 3. process batch N−1 while batch N runs
        if len(result_queue) > (1 if batch is not None else 0):
            prev_batch, prev_launch = result_queue.popleft()
            t2 = timeline.now()
            scheduler.process_batch_result(prev_batch, prev_launch)
            prev_launch.record.proc = (t2, timeline.now())
        if batch is None and not result_queue:
            break
    timeline.end = timeline.now()


LOOPS = {"normal": event_loop_normal, "overlap": event_loop_overlap}
