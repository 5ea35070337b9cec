"""Exercise 08.1 (notebook 08_overlap_scheduling): write the launch, in the right order.

The student writes the whole body of ``run_batch(device, batch, in_flight) -> Launch``: write
``batch.fields`` into the device's reused staging buffer (``device.write_inputs``), launch it
(``device.launch``, future input ids for a decode batch only), and wait where the order needs it, where
``in_flight`` is the launch the device may still be reading (``None`` for the first batch). The
barrier, ``in_flight.wait_inputs_read()``, must come *before* the write. Waiting for the in-flight
batch's *result* is safe too, but serialises the loop: the device then idles while the CPU schedules.

The check runs the real overlap loop (``ToyScheduler`` over the CPU worker process) with the
student's ``run_batch`` on an **adversarial** device that reads a launch's inputs only when the CPU
launches the next batch or blocks on this one: a missing or late barrier corrupts the same batches on
every run, so the verdict never varies. As every exercise, so that a grader can score outside the student's
kernel: ``drive`` runs the student's code and returns plain data (lists, ints, strings); ``compare``
judges that data against the reference's (``radixlab.course.spec``).
"""

from __future__ import annotations

import random
from typing import Any, Callable

from ..engine.synthetic import LOOPS, ToyBatch, ToyScheduler, python_work, toy_backend
from .spec import CheckResult, ExerciseSpec, GradedCase, check_exercise

EXERCISE = "08.1"
TITLE = "write, launch and wait, in order"


def reference_run_batch(*args: Any) -> Any:
    """The instructor's answer, loaded on demand from ``answers_overlap`` (absent from the executor process)."""
    from .answers_overlap import reference_run_batch as answer
    return answer(*args)


class WaveScheduler(ToyScheduler):
    """Requests arrive in two waves: the second wave's *prefill* is launched while a decode batch of the
    first wave is still in flight (as in a real server, where new requests join a running batch). A
    barrier that guards only decode batches corrupts that decode; ``ToyScheduler`` alone never shows
    it, since all its requests start together and its only prefill is the first batch."""

    def __init__(self, backend: Any, *, second_wave_at: int, **kwargs: Any) -> None:
        super().__init__(backend, **kwargs)
        self.second_wave_at = second_wave_at
        self.late = {r.rid for r in self.reqs[(len(self.reqs) + 1) // 2:]}

    def get_next_batch_to_run(self) -> ToyBatch | None:
        arrived = self.step >= self.second_wave_at or all(
            r.scheduled >= r.max_new_tokens for r in self.reqs if r.rid not in self.late)
        active = [r for r in self.reqs if r.scheduled < r.max_new_tokens and (arrived or r.rid not in self.late)]
        if not active:
            return None
        python_work(self.cpu_ms * 2 / 3 / 1e3)
        new = [r for r in active if r.scheduled == 0]
        return self.make_batch(new, is_prefill=True) if new else self.make_batch(active, is_prefill=False)


class _View:
    """What ``run_batch`` gets instead of the real device or launch: only the methods the exercise is about
    (``allowed``), each call of a ``logged`` one noted in ``drive``'s own list. The evidence that the loop
    still overlaps is that log (did ``run_batch`` wait for a result or synchronize?), not the launch
    records, which the student's code could otherwise reach (``launch.record``, ``launch.backend``) and
    rewrite. A launch the device hands back is wrapped the same way; ``drive`` unwraps what ``run_batch``
    returns. The view keeps no reference to its target that code holding the view could read: only the
    ``get`` closure and ``drive``'s own map know it."""

    def __init__(self, target: Any, log: Callable[[str], None], allowed: tuple[str, ...],
                 logged: tuple[str, ...] = (), wrap: dict[str, Callable[[Any], Any]] | None = None) -> None:
        def get(name: str) -> Any:
            if name not in allowed:
                raise AttributeError(f"run_batch may use only {', '.join(allowed)} here, not {name!r}")
            value = getattr(target, name)
            if name not in logged and name not in (wrap or {}):
                return value

            def call(*a: Any, **k: Any) -> Any:
                if name in logged:
                    log(name)
                out = value(*a, **k)
                return wrap[name](out) if wrap and name in wrap else out
            return call
        object.__setattr__(self, "_get", get)

    def __getattr__(self, name: str) -> Any:
        return object.__getattribute__(self, "_get")(name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("run_batch may not change the device or the launch")


LAUNCH_API = ("wait_inputs_read", "result", "step")
DEVICE_API = ("write_inputs", "launch", "synchronize")


def _run(run_batch: Callable, args: dict, loop: str) -> dict:
    waits: list[int] = []  # steps whose run_batch waited for a result (or synchronized the device)
    targets: dict[int, Any] = {}  # id(view) -> the launch behind it
    views: list[_View] = []  # every view stays alive for the run, so no other object can take its id

    def watched(device: Any, batch: Any, in_flight: Any) -> Any:
        def log(name: str) -> None:
            waits.append(batch.step)
        def launch_view(launch: Any) -> _View:
            v = _View(launch, log, LAUNCH_API, logged=("result",))
            targets[id(v)] = launch
            views.append(v)
            return v
        view = None if in_flight is None else launch_view(in_flight)
        dev = _View(device, log, DEVICE_API, logged=("synchronize",), wrap={"launch": launch_view})
        out = run_batch(dev, batch, view)
        return targets.get(id(out), out)

    with toy_backend("cpu-process", layers=2, hidden=32, adversarial=True) as be:
        kwargs = dict(num_reqs=args["num_reqs"], max_new_tokens=args["max_new_tokens"], cpu_ms=0.0,
                      war_barrier=False, seed=args.get("seed", 0), run_batch_fn=watched)
        if "second_wave_at" in args:
            sched: ToyScheduler = WaveScheduler(be, second_wave_at=args["second_wave_at"], **kwargs)
        else:
            sched = ToyScheduler(be, **kwargs)
        LOOPS[loop](sched)
        steps = sched.timeline.steps()
        return {"outputs": sched.outputs(), "corrupted": [r.step for r in steps if r.corrupted],
                "consumed": [r.consumed_step for r in steps], "overlapped": [bool(r.overlapped) for r in steps],
                "waited": sorted(set(waits)), "steps": len(steps)}


def drive(run_batch: Callable, args: dict) -> dict:
    """Run one scenario's event loop with ``run_batch`` on the adversarial device; what happened, as plain data.

    ``also_normal``: the normal loop runs first on the same requests (its outputs are reported too)."""
    normal = _run(run_batch, args, "normal")["outputs"] if args.get("also_normal") else None
    out = _run(run_batch, args, args["loop"])
    if normal is not None:
        out["normal_outputs"] = normal
    return out


def compare(got: dict, want: dict, args: dict) -> str | None:
    if got == want:
        return None
    what = f"{args['loop']} loop, {args['num_reqs']} requests × {args['max_new_tokens']} tokens"
    if "second_wave_at" in args:
        what += f", half of them arriving at step {args['second_wave_at']}"
    if got["corrupted"]:
        first = got["corrupted"][0]
        return (f"{what}: {len(got['corrupted'])} of {got['steps']} batches were corrupted — batch {first} ran with "
                f"batch {got['consumed'][first]}'s inputs. The CPU overwrote the staging buffer before the device "
                "had read it: wait for in_flight's inputs to be read *before* device.write_inputs(...)"
                + (" — for every batch, a prefill too" if "second_wave_at" in args else ""))
    if got.get("normal_outputs") != want.get("normal_outputs"):
        return f"normal loop, {args['num_reqs']} requests × {args['max_new_tokens']} tokens: the tokens differ from the reference run"
    if got["outputs"] != want["outputs"]:
        return (f"{what}: no batch was corrupted, but the tokens differ from the reference run. Look at "
                "resolve_future: a decode batch's input ids are the previous step's tokens, still on the device "
                "(True); a prefill brings its own in batch.fields (False)")
    if got["overlapped"] != want["overlapped"] or got["waited"] != want["waited"]:
        lost = max(sum(w and not g for g, w in zip(got["overlapped"], want["overlapped"])), len(got["waited"]))
        return (f"{what}: safe, but {lost} batches lost their overlap — the CPU waited for a batch's *result* "
                "before launching the next one, so the device idled. The barrier only needs the inputs read: "
                "in_flight.wait_inputs_read(), not in_flight.result()")
    return f"{what}: the run differs from the reference"


def cases(seed: int = 0) -> list[GradedCase]:
    rng = random.Random(seed)
    c = lambda loop, n, t, s=0: {"loop": loop, "num_reqs": n, "max_new_tokens": t, "seed": s}  # noqa: E731
    return [
        GradedCase("overlap loop, 3 requests, 6 tokens: no batch reads another's inputs, the loop still overlaps",
                   c("overlap", 3, 6)),
        GradedCase("overlap loop, more requests and tokens", c("overlap", 6 + rng.randrange(4), 8 + rng.randrange(4),
                                                               seed), "boundary"),
        GradedCase("one request, two tokens: the smallest run with a batch in flight", c("overlap", 1, 2), "boundary"),
        GradedCase("a second wave of requests: its prefill is launched while a decode batch is in flight",
                   dict(c("overlap", 4 + rng.randrange(3), 5 + rng.randrange(3), seed), second_wave_at=2 + rng.randrange(2)),
                   "boundary"),
        GradedCase("the normal loop, then the overlap loop on the same requests",
                   dict(c("overlap", 4, 5, seed), also_normal=True), "boundary"),
    ]


SPEC = ExerciseSpec(
    id=EXERCISE, title=TITLE, function="run_batch", check="check_run_batch", reference=reference_run_batch,
    drive=drive, cases=cases, compare=compare, time_limit=60.0,
    forbidden=("reference_run_batch", "no_barrier", "barrier_after_write", "barrier_after_launch",
               "barrier_for_decode_only", "full_sync", "synchronizes", "always_resolve_future"),
    strip=())  # the answer lives only in answers_overlap, which no copy holds
SPECS = [SPEC]


def check_run_batch(run_batch: Callable, *, record: bool = True) -> CheckResult:
    """Check a student's ``run_batch(device, batch, in_flight)`` (exercise 08.1)."""
    return check_exercise(SPEC, run_batch, record=record)


# Plausible wrong answers (tests use them to prove the check can fail):

def no_barrier(device: Any, batch: Any, in_flight: Any) -> Any:
    layout = device.write_inputs(batch.step, batch.fields)
    return device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)


def barrier_after_write(device: Any, batch: Any, in_flight: Any) -> Any:
    layout = device.write_inputs(batch.step, batch.fields)
    if in_flight is not None:
        in_flight.wait_inputs_read()
    return device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)


def barrier_for_decode_only(device: Any, batch: Any, in_flight: Any) -> Any:
    if in_flight is not None and not batch.is_prefill:  # wrong: a prefill reuses the same staging buffer
        in_flight.wait_inputs_read()
    layout = device.write_inputs(batch.step, batch.fields)
    return device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)


def full_sync(device: Any, batch: Any, in_flight: Any) -> Any:
    if in_flight is not None:
        in_flight.result()
    layout = device.write_inputs(batch.step, batch.fields)
    return device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)


def barrier_after_launch(device: Any, batch: Any, in_flight: Any) -> Any:
    layout = device.write_inputs(batch.step, batch.fields)
    launch = device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)
    if in_flight is not None:  # wrong: the write above already overwrote what in_flight may not have read
        in_flight.wait_inputs_read()
    return launch


def synchronizes(device: Any, batch: Any, in_flight: Any) -> Any:
    device.synchronize()  # safe, but waits for every launch's tokens: the overlap is gone
    layout = device.write_inputs(batch.step, batch.fields)
    return device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)


def always_resolve_future(device: Any, batch: Any, in_flight: Any) -> Any:
    if in_flight is not None:
        in_flight.wait_inputs_read()
    layout = device.write_inputs(batch.step, batch.fields)
    return device.launch(batch.step, layout, len(batch.reqs), resolve_future=True)  # wrong for a prefill
