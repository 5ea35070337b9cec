"""Gantt charts of event-loop timelines (notebook 08_overlap_scheduling).

Three lanes per run: **CPU** (scheduling in blue, result processing in green, blocked time hatched:
waiting for a result or at the WAR barrier), **device** (forwards in orange, the read of the staging
buffer in purple) and **copy** (results to the host). Gaps in the device lane are shaded red: the
bubbles that overlap scheduling removes. ``step_frames`` turns one timeline into a list of text
frames, one per event, for the notebook's stepper (``radixlab.viz.frame_slider``).
"""

from __future__ import annotations

from typing import Sequence

from ..engine.timeline import Span, StepRecord, Timeline

COLORS = {"sched": "#4C72B0", "proc": "#55A868", "blocked": "#BBBBBB", "dev": "#DD8452", "read": "#8172B3",
          "copy": "#937860", "idle": "#F4CCCC"}
LANES = ("CPU", "device", "copy")


def _bars(spans: list[Span | None], t0: float, scale: float) -> list[tuple[float, float]]:
    return [((a - t0) * scale, (b - a) * scale) for a, b in (s for s in spans if s)]


def device_gaps(tl: Timeline) -> list[Span]:
    """Idle gaps of the device between its first and last busy moment."""
    busy = sorted(s for r in tl.steps() for s in (r.read, r.dev, r.copy) if s)
    gaps, end = [], None
    for a, b in busy:
        if end is not None and a > end:
            gaps.append((end, a))
        end = b if end is None else max(end, b)
    return gaps


def draw_timeline(tl: Timeline, ax, t0: float | None = None, upto: float | None = None, title: str | None = None,
                  highlight: int | None = None, marks: bool = False) -> None:
    """Draw one run on ``ax`` (milliseconds on x). ``upto`` hides everything after that time (the stepper).
    ``marks``: batch numbers on the CPU bars, and each batch's write (▼, CPU lane) joined to its read
    (▲, device lane); red when the device read other inputs than the CPU wrote."""
    steps = tl.steps()
    t0 = tl.window()[0] if t0 is None else t0
    ms = 1e3

    def clip(spans: list[Span | None]) -> list[Span]:
        if upto is None:
            return [s for s in spans if s]
        return [(a, min(b, upto)) for a, b in (s for s in spans if s) if a <= upto]

    y = {"CPU": 20, "device": 10, "copy": 0}
    h = 8
    ax.broken_barh(_bars(clip(device_gaps(tl)), t0, ms), (y["device"] - 1, h + 2), facecolors=COLORS["idle"])
    ax.broken_barh(_bars(clip([r.sched for r in steps]), t0, ms), (y["CPU"], h), facecolors=COLORS["sched"])
    ax.broken_barh(_bars(clip([r.proc for r in steps]), t0, ms), (y["CPU"], h), facecolors=COLORS["proc"])
    ax.broken_barh(_bars(clip([s for r in steps for s in (r.wait, r.barrier)]), t0, ms), (y["CPU"], h),
                   facecolors=COLORS["blocked"], hatch="//", edgecolor="#777777", linewidth=0)
    ax.broken_barh(_bars(clip([r.dev for r in steps]), t0, ms), (y["device"], h), facecolors=COLORS["dev"],
                   edgecolor="white", linewidth=0.5)
    ax.broken_barh(_bars(clip([r.read for r in steps]), t0, ms), (y["device"], h), facecolors=COLORS["read"])
    ax.broken_barh(_bars(clip([r.copy for r in steps]), t0, ms), (y["copy"], h), facecolors=COLORS["copy"])
    for r in steps:  # batch numbers on the device bars
        if r.dev and (upto is None or r.dev[0] <= upto) and len(steps) <= 40:
            color = "black" if highlight in (None, r.step) else "#999999"
            ax.text((r.dev[0] - t0) * ms, y["device"] + h / 2, str(r.step), fontsize=7, va="center",
                    color="red" if r.corrupted else color)
    if marks:
        _draw_marks(steps, ax, t0, ms, y, h, upto)
    ax.set_yticks([y[k] + h / 2 for k in LANES], LANES)
    ax.set_xlabel("time (ms)")
    end = max((r.proc[1] for r in steps if r.proc), default=t0)
    ax.set_xlim(0, (end - t0) * ms * 1.01)
    ax.set_ylim(-2, 30)
    if title:
        ax.set_title(title, fontsize=10, loc="left")


def _draw_marks(steps: list[StepRecord], ax, t0: float, ms: float, y: dict, h: float, upto: float | None) -> None:
    for r in steps:
        if r.sched and (upto is None or r.sched[0] <= upto):
            ax.text((r.sched[0] + r.sched[1] - 2 * t0) / 2 * ms, y["CPU"] + h / 2, str(r.step), fontsize=7,
                    ha="center", va="center", color="white", fontweight="bold")
        if r.write is None or r.read is None or (upto is not None and r.read[0] > upto):
            continue
        color = "red" if r.corrupted else "black"
        xw, xr = (r.write - t0) * ms, (r.read[0] - t0) * ms
        ax.plot([xw, xr], [y["CPU"] - 0.3, y["device"] + h + 0.3], color=color, linewidth=0.8,
                linestyle="-" if r.corrupted else ":")
        ax.plot([xw], [y["CPU"] - 0.3], marker="v", color=color, markersize=5)
        ax.plot([xr], [y["device"] + h + 0.3], marker="^", color=color, markersize=5)


def summary_line(tl: Timeline) -> str:
    return (f"{tl.loop} loop: {tl.throughput():.0f} tok/s, device idle {tl.device_idle_fraction():.0%}, "
            f"CPU {tl.cpu_time_per_step() * 1e3:.1f} ms/step, device {tl.device_time_per_step() * 1e3:.1f} ms/step")


def draw_timelines(timelines: Sequence[Timeline], same_scale: bool = True, width: float = 11.0,
                   labels: Sequence[str] | None = None, marks: bool = False):
    """One Gantt chart per run, stacked, on a common time scale; returns the matplotlib Figure.
    ``labels`` (one per run) prefix each run's title; ``marks`` as in ``draw_timeline``."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if not timelines:
        raise ValueError("timelines must not be empty")
    fig, axes = plt.subplots(len(timelines), 1, figsize=(width, 1.9 * len(timelines) + 0.6), squeeze=False)
    longest = max(tl.wall_time() for tl in timelines)
    if labels is not None and len(labels) != len(timelines):
        raise ValueError(f"labels must have one entry per timeline ({len(timelines)}), got {len(labels)}")
    for i, (ax, tl) in enumerate(zip(axes[:, 0], timelines)):
        draw_timeline(tl, ax, title=(f"{labels[i]}: " if labels else "") + summary_line(tl), marks=marks)
        if same_scale:
            ax.set_xlim(0, longest * 1e3 * 1.01)
    handles = [Patch(color=COLORS[k], label=label) for k, label in
               (("sched", "CPU: schedule + launch"), ("proc", "CPU: process results"), ("blocked", "CPU: blocked"),
                ("read", "device: read inputs"), ("dev", "device: forward"), ("copy", "copy to host"),
                ("idle", "device idle"))]
    if marks:
        handles += [Line2D([], [], color="black", marker="v", linestyle=":", markersize=5,
                           label="CPU writes inputs ▼ … device reads them ▲"),
                    Line2D([], [], color="red", marker="^", linestyle="-", markersize=5,
                           label="read after the next write (corrupted)")]
    fig.legend(handles=handles, loc="lower center", ncol=5 if marks else 7, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.1 if marks else 0.06, 1, 1))
    return fig


# -- the stepper ------------------------------------------------------------------------------------


def timeline_events(tl: Timeline) -> list[tuple[float, str]]:
    """Every recorded moment, in time order: (seconds since the window start, what happened)."""
    t0 = tl.window()[0]
    ev: list[tuple[float, str]] = []

    def add(span: Span | None, what: str, r: StepRecord, end: bool = False) -> None:
        if span:
            ev.append(((span[1] if end else span[0]) - t0, what.format(n=r.step)))

    for r in tl.steps():
        add(r.sched, "CPU   schedules batch {n} (match, allocate, build inputs, write staging)", r)
        if r.launch is not None:
            ev.append((r.launch - t0, f"CPU   launches batch {r.step}"))
        add(r.barrier, "CPU   waits at the WAR barrier until batch {n}'s inputs are read", r)
        add(r.read, "dev   reads batch {n}'s inputs" + (" — CORRUPTED: they are batch "
                                                           f"{r.consumed_step}'s" if r.corrupted else ""), r)
        add(r.dev, "dev   runs batch {n}'s forward", r)
        add(r.copy, "copy  batch {n}'s tokens reach the host", r, end=True)
        add(r.wait, "CPU   blocks until batch {n}'s tokens are on the host", r)
        add(r.proc, "CPU   processes batch {n}'s results", r)
    ev.sort(key=lambda e: e[0])
    return ev


def step_frames(tl: Timeline, max_events: int = 24) -> list[str]:
    """Text frames for the stepper: frame k lists the first k+1 events (the last one marked)."""
    ev = timeline_events(tl)[:max_events]
    frames = []
    for k in range(len(ev)):
        lines = [f"{'▶' if i == k else ' '} {t * 1e3:7.2f} ms  {what}" for i, (t, what) in enumerate(ev[:k + 1])]
        frames.append(f"{tl.loop} loop, event {k + 1}/{len(ev)}\n" + "\n".join(lines))
    return frames


def plot_ratio_curve(rows: Sequence[dict], ax=None):
    """Measured overlap/normal throughput ratio against device/CPU time per step, with the ideal
    ``(c + d) / max(c, d)`` curve; ``rows`` as ``radixlab.benchmarks.overlap.curve`` returns them."""
    import matplotlib.pyplot as plt

    if not rows:
        raise ValueError("rows must not be empty")
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.4))
    xs = [r["proportion"] for r in rows]
    grid = [0.2 + i * (max(max(xs), 1.0) * 1.15 - 0.2) / 100 for i in range(101)]
    ax.plot(grid, [(1 + x) / max(1.0, x) for x in grid], color="#999999", label="ideal (c+d)/max(c,d)")
    ax.plot(xs, [r["ratio"] for r in rows], "o-", color=COLORS["sched"], label="measured")
    ax.axvline(1.0, color="#999999", linestyle=":", label="ideal peak: device = CPU")
    ax.set_xlabel("device time / scheduler CPU time per step")
    ax.set_ylabel("throughput overlap / normal")
    ax.set_ylim(min(0.8, min(r["ratio"] for r in rows) - 0.1), 2.2)
    ax.legend(fontsize=8)
    fig = fig or ax.figure
    fig.tight_layout()
    return fig


def draw_pipeline(tl: Timeline, step: int | None = None, width: float = 9.0):
    """The overlap picture of the engine lesson, drawn from a measured overlap run: the CPU thread
    schedules batch N+1 (and processes earlier results) while the device runs batch N; N+1 starts when
    N ends. ``step`` is N (default: one in the middle of the run). Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    recs = {r.step: r for r in tl.steps()}
    usable = [k for k in sorted(recs) if k + 1 in recs and recs[k].dev and recs[k + 1].sched and recs[k + 1].dev]
    if not usable:
        raise ValueError("the timeline needs two consecutive launched steps")
    if step is None:
        step = usable[len(usable) // 2]
    elif step not in usable:
        raise ValueError(f"step must be one of {usable}, got {step!r}")
    n, m = recs[step], recs[step + 1]
    t0 = min(n.dev[0], m.sched[0])
    t1 = max(m.dev[1], m.sched[1])
    ms = 1e3
    fig, ax = plt.subplots(figsize=(width, 2.7))
    y = {"cpu": 10, "dev": 0}
    h = 7

    def bar(span: Span, lane: str, color: str, text: str = "", **kw) -> None:
        a, b = max(span[0], t0), min(span[1], t1)
        if b <= a:
            return
        ax.broken_barh([((a - t0) * ms, (b - a) * ms)], (y[lane], h), facecolors=color, edgecolor="white", **kw)
        if not text:
            return
        if (b - a) / (t1 - t0) > 0.009 * len(text):  # the label fits inside; the legend names the rest
            ax.text((a + b - 2 * t0) / 2 * ms, y[lane] + h / 2, text, ha="center", va="center", fontsize=8,
                    color="black" if color == COLORS["blocked"] else "white")

    for r in recs.values():  # result processing that falls in the window: what the picture leaves out
        if r.proc:
            bar(r.proc, "cpu", COLORS["proc"], f"results of {r.step}")
    end = m.launch if m.launch is not None else m.sched[1]
    bar((m.sched[0], end), "cpu", COLORS["sched"], f"schedule batch {m.step}")
    for r in (n, m):
        if r.barrier:
            bar(r.barrier, "cpu", COLORS["blocked"], f"barrier: until {r.step} is read", hatch="//")
    bar(n.dev, "dev", COLORS["dev"], f"batch {n.step}: forward")
    bar(m.dev, "dev", COLORS["dev"], f"batch {m.step}: forward")
    if m.launch is not None and t0 <= m.launch <= t1:
        ax.annotate("", xy=((m.dev[0] - t0) * ms, y["dev"] + h), xytext=((m.launch - t0) * ms, y["cpu"]),
                    arrowprops=dict(arrowstyle="->", color="#444444"))
    from matplotlib.patches import Patch
    handles = [Patch(color=COLORS["sched"], label="schedule + launch"), Patch(color=COLORS["proc"], label="process results"),
               Patch(facecolor=COLORS["blocked"], hatch="//", label="barrier: wait for the read"),
               Patch(color=COLORS["dev"], label="forward")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=4, fontsize=8, frameon=False)
    ax.set_yticks([y["dev"] + h / 2, y["cpu"] + h / 2], ["device\n(forward stream)", "CPU\n(scheduler thread)"])
    ax.set_xlim(0, (t1 - t0) * ms * 1.02)
    ax.set_ylim(-1, 18)
    ax.set_xlabel("time (ms, measured)")
    ax.set_title(f"while the device runs batch {n.step}, the CPU schedules batch {m.step}; the arrow is its launch",
                 fontsize=10, loc="left")
    fig.tight_layout()
    return fig
