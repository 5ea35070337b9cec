"""Exercise 08.1 (notebook 08_overlap_scheduling): place the WAR barrier.

The student writes ``run_batch(device, batch, in_flight) -> Launch``: write ``batch.fields`` into
the device's reused staging buffer (``device.write_inputs``) and launch it (``device.launch``), where
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

from ..engine.overlap import LOOPS
from ..engine.synthetic import ToyScheduler, launch_with_barrier, toy_backend
from .spec import CheckResult, ExerciseSpec, GradedCase, check_exercise

EXERCISE = "08.1"
TITLE = "place the WAR barrier"


def reference_run_batch(device: Any, batch: Any, in_flight: Any) -> Any:
    """The answer: barrier, write, launch (``radixlab.engine.synthetic.launch_with_barrier``)."""
    return launch_with_barrier(device, batch, in_flight)


def drive(run_batch: Callable, args: dict) -> dict:
    """Run one scenario's event loop with ``run_batch`` on the adversarial device; what happened, as plain data."""
    with toy_backend("cpu-process", layers=2, hidden=32, adversarial=True) as be:
        sched = ToyScheduler(be, num_reqs=args["num_reqs"], max_new_tokens=args["max_new_tokens"], cpu_ms=0.0,
                             war_barrier=False, seed=args.get("seed", 0), run_batch_fn=run_batch)
        tl = be.new_timeline(args["loop"])
        LOOPS[args["loop"]](sched, tl)
        steps = tl.steps()
        return {"outputs": sched.outputs(), "corrupted": [r.step for r in steps if r.corrupted],
                "consumed": [r.consumed_step for r in steps], "overlapped": [bool(r.overlapped) for r in steps],
                "steps": len(steps)}


def compare(got: dict, want: dict, args: dict) -> str | None:
    if got == want:
        return None
    what = f"{args['loop']} loop, {args['num_reqs']} requests × {args['max_new_tokens']} tokens"
    if got["corrupted"]:
        first = got["corrupted"][0]
        return (f"{what}: {len(got['corrupted'])} of {got['steps']} batches were corrupted — batch {first} ran with "
                f"batch {got['consumed'][first]}'s inputs. The CPU overwrote the staging buffer before the device "
                "had read it: wait for in_flight's inputs to be read *before* device.write_inputs(...)")
    if got["outputs"] != want["outputs"]:
        return f"{what}: the tokens differ from the reference run"
    if got["overlapped"] != want["overlapped"]:
        lost = sum(w and not g for g, w in zip(got["overlapped"], want["overlapped"]))
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
        GradedCase("one request, one token (nothing in flight)", c("overlap", 1, 1), "boundary"),
        GradedCase("the normal loop still works", c("normal", 4, 5, seed), "boundary"),
    ]


SPEC = ExerciseSpec(
    id=EXERCISE, title=TITLE, function="run_batch", check="check_run_batch", reference=reference_run_batch,
    drive=drive, cases=cases, compare=compare, time_limit=60.0,
    forbidden=("reference_run_batch", "launch_with_barrier", "no_barrier", "barrier_after_write", "full_sync"))
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


def full_sync(device: Any, batch: Any, in_flight: Any) -> Any:
    if in_flight is not None:
        in_flight.result()
    layout = device.write_inputs(batch.step, batch.fields)
    return device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)
