"""Timeline records of an event loop: when the CPU scheduled, when the device read, ran and copied.

Every launched batch gets one ``StepRecord``. The CPU side (scheduler) fills the ``sched``,
``barrier``, ``wait`` and ``proc`` spans; the device backend fills ``read``, ``dev`` and ``copy``.
All times are seconds since ``Timeline.t0`` on ``time.perf_counter`` (a system-wide monotonic clock
on Linux and macOS, so a worker process's stamps line up with the scheduler's). Notebook
08_overlap_scheduling draws them with ``radixlab.viz.timeline.draw_timelines``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields

Span = tuple[float, float]


@dataclass
class StepRecord:
    """What happened to batch ``step``; a span is ``(start, end)`` in seconds or ``None``."""

    step: int
    kind: str = "decode"
    batch_size: int = 0
    sched: Span | None = None  # CPU: get_next_batch_to_run + writing the staging buffer
    write: float | None = None  # CPU: the inputs were written into the staging buffer
    launch: float | None = None  # CPU: the launch command was issued
    barrier: Span | None = None  # CPU: waiting at the WAR barrier for this batch's input read
    read: Span | None = None  # device: consuming the staging buffer (H2D copy on CUDA)
    dev: Span | None = None  # device: the forward (and sampling)
    copy: Span | None = None  # device → host copy of the sampled tokens
    wait: Span | None = None  # CPU: blocked until the results were on the host
    proc: Span | None = None  # CPU: process_batch_result
    corrupted: bool = False  # the device consumed other inputs than the CPU wrote for this step
    consumed_step: int | None = None  # whose inputs the device actually read (== step when sound)
    overlapped: bool | None = None  # adversarial device only: step+1 was launched before step's result was needed

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class Timeline:
    """The records of one run of an event loop, plus the facts needed to read them."""

    loop: str  # "normal" | "overlap"
    backend: str  # "in-process" | "cpu-process" | "cpu-thread" | "cuda"
    t0: float = field(default_factory=time.perf_counter)
    records: dict[int, StepRecord] = field(default_factory=dict)
    end: float | None = None  # seconds since t0 when the loop returned

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def record(self, step: int) -> StepRecord:
        if step not in self.records:
            self.records[step] = StepRecord(step)
        return self.records[step]

    def steps(self) -> list[StepRecord]:
        return [self.records[k] for k in sorted(self.records)]

    # -- measured facts -----------------------------------------------------------------------

    def window(self) -> Span:
        """From the first CPU scheduling to the last processed result: the run's wall time."""
        recs = self.steps()
        start = min(r.sched[0] for r in recs if r.sched)
        stop = max(r.proc[1] for r in recs if r.proc)
        return start, stop

    def wall_time(self) -> float:
        a, b = self.window()
        return b - a

    def device_idle_fraction(self, skip_first: int = 1) -> float:
        """Share of the window (from the device's first busy moment after ``skip_first`` steps to its
        last) in which the device did nothing: the bubbles between steps."""
        recs = [r for r in self.steps() if r.dev][skip_first:]
        if not recs:
            return 0.0
        start = min((r.read or r.dev)[0] for r in recs)
        stop = max((r.copy or r.dev)[1] for r in recs)
        busy = _union_length([s for r in recs for s in (r.read, r.dev, r.copy) if s])
        return max(0.0, 1.0 - busy / (stop - start)) if stop > start else 0.0

    def cpu_time_per_step(self) -> float:
        """Median CPU seconds per step spent scheduling and processing results (not waiting)."""
        xs = [_length(r.sched) + _length(r.proc) - _length(r.barrier) - _length(r.wait)
              for r in self.steps() if r.sched and r.proc]
        return _median(xs)

    def device_time_per_step(self) -> float:
        """Median device seconds per step (read + forward + copy)."""
        xs = [sum(s[1] - s[0] for s in (r.read, r.dev, r.copy) if s) for r in self.steps() if r.dev]
        return _median(xs)

    def corrupted_steps(self) -> list[int]:
        return [r.step for r in self.steps() if r.corrupted]

    def tokens(self) -> int:
        return sum(r.batch_size for r in self.steps())

    def throughput(self) -> float:
        """Tokens per second over the run's window."""
        return self.tokens() / self.wall_time()

    def summary(self) -> str:
        return (f"{self.loop:>7} loop on {self.backend}: {len(self.records)} steps, {self.tokens()} tokens in "
                f"{self.wall_time() * 1e3:.0f} ms ({self.throughput():.0f} tok/s); device idle "
                f"{self.device_idle_fraction():.0%}; CPU {self.cpu_time_per_step() * 1e3:.1f} ms/step, device "
                f"{self.device_time_per_step() * 1e3:.1f} ms/step; corrupted steps: {len(self.corrupted_steps())}")


def ideal_overlap_ratio(cpu: float, device: float) -> float:
    """Throughput ratio overlap/normal when each step costs ``cpu`` seconds of scheduling and
    ``device`` seconds of device work: the normal loop pays ``cpu + device`` per step, the overlap
    loop ``max(cpu, device)``."""
    if cpu < 0 or device < 0:
        raise ValueError(f"cpu and device times must be non-negative, got cpu={cpu}, device={device}")
    longest = max(cpu, device)
    return (cpu + device) / longest if longest > 0 else 1.0


def _length(span: Span | None) -> float:
    return span[1] - span[0] if span else 0.0


def _union_length(spans: list[Span]) -> float:
    total, cur_a, cur_b = 0.0, None, None
    for a, b in sorted(spans):
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total


def _median(xs: list[float]) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])
