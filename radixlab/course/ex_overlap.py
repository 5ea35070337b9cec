"""Exercise 08.1 (notebook 08_overlap_scheduling): place the WAR barrier.

The student writes ``run_batch(device, batch, in_flight) -> Launch``: write ``batch.fields`` into
the device's reused staging buffer (``device.write_inputs``) and launch it (``device.launch``), where
``in_flight`` is the launch the device may still be reading (``None`` for the first batch). The
barrier, ``in_flight.wait_inputs_read()``, must come *before* the write. Waiting for the in-flight
batch's *result* is safe too, but serialises the loop: the device then idles while the CPU schedules.

The check runs the real overlap loop (``ToyScheduler`` over the CPU worker process) with the
student's ``run_batch`` on an **adversarial** device that reads a launch's inputs only when the CPU
launches the next batch or blocks on this one: a missing or late barrier corrupts the same batches on
every run, so the verdict never varies. Two layers, so a grader can score outside the student's
kernel: ``collect_run_batch`` runs the student's code and returns plain data (lists, ints, strings);
``verdict_run_batch`` turns that data into the verdict. ``check_run_batch`` does both.
"""

from __future__ import annotations

from typing import Any, Callable

from ..engine.overlap import LOOPS
from ..engine.synthetic import ToyScheduler, launch_with_barrier, toy_backend
from .check import Case, CheckResult, own_code, run_check

EXERCISE = "08.1"
TITLE = "place the WAR barrier"

SCENARIOS = {  # name: (loop, num_reqs, max_new_tokens, hidden)
    "overlap loop, 3 requests, 6 tokens": ("overlap", 3, 6, False),
    "overlap loop, 8 requests, 10 tokens": ("overlap", 8, 10, True),
    "one request, one token (nothing in flight)": ("overlap", 1, 1, True),
    "the normal loop still works": ("normal", 4, 5, True),
}


def reference_run_batch(device: Any, batch: Any, in_flight: Any) -> Any:
    """The answer: barrier, write, launch (``radixlab.engine.synthetic.launch_with_barrier``)."""
    return launch_with_barrier(device, batch, in_flight)


def _run(run_batch: Callable | None, loop: str, num_reqs: int, max_new_tokens: int) -> dict:
    with toy_backend("cpu-process", layers=2, hidden=32, adversarial=True) as be:
        sched = ToyScheduler(be, num_reqs=num_reqs, max_new_tokens=max_new_tokens, cpu_ms=0.0, war_barrier=False,
                             run_batch_fn=run_batch or reference_run_batch)
        tl = be.new_timeline(loop)
        LOOPS[loop](sched, tl)
        steps = tl.steps()
        return {"outputs": sched.outputs(), "corrupted": [r.step for r in steps if r.corrupted],
                "consumed": [r.consumed_step for r in steps], "overlapped": [bool(r.overlapped) for r in steps],
                "steps": len(steps)}


def collect_run_batch(run_batch: Callable) -> dict:
    """Run every scenario with the student's ``run_batch`` and with the reference; plain data only."""
    evidence: dict = {"exercise": EXERCISE, "scenarios": {}}
    for name, (loop, n, t, hidden) in SCENARIOS.items():
        want = _run(None, loop, n, t)
        try:
            got = _run(run_batch, loop, n, t)
            got["error"] = None
        except NotImplementedError:
            got = {"error": "NotImplementedError"}
        except Exception as exc:  # the student's code raised: evidence, not a crash of the check
            got = {"error": f"{type(exc).__name__}: {exc}"}
        evidence["scenarios"][name] = {"loop": loop, "hidden": hidden, "got": got, "want": want}
    return evidence


def _judge(name: str, s: dict) -> None:
    got, want = s["got"], s["want"]
    if got.get("error") == "NotImplementedError":
        raise NotImplementedError
    if got.get("error"):
        raise AssertionError(f"{name}: run_batch raised {got['error']}")
    if got["corrupted"]:
        first = got["corrupted"][0]
        raise AssertionError(
            f"{name}: {len(got['corrupted'])} of {got['steps']} batches were corrupted — batch {first} ran with "
            f"batch {got['consumed'][first]}'s inputs. The CPU overwrote the staging buffer before the device had "
            "read it: wait for in_flight's inputs to be read *before* device.write_inputs(...)")
    if got["outputs"] != want["outputs"]:
        raise AssertionError(f"{name}: the tokens differ from the reference run")
    if s["loop"] == "overlap" and got["overlapped"] != want["overlapped"]:
        lost = sum(w and not g for g, w in zip(got["overlapped"], want["overlapped"]))
        raise AssertionError(
            f"{name}: safe, but {lost} batches lost their overlap — the CPU waited for a batch's *result* before "
            "launching the next one, so the device idled. The barrier only needs the inputs read: "
            "in_flight.wait_inputs_read(), not in_flight.result()")


def verdict_run_batch(evidence: dict) -> CheckResult:
    """The verdict from ``collect_run_batch``'s plain data (no student code runs here)."""
    sc = evidence["scenarios"]
    main = "overlap loop, 3 requests, 6 tokens"
    cases = [Case("no batch reads another batch's inputs", lambda: _judge(main, {**sc[main], "loop": "normal"}),
                  points=2),
             Case("the loop still overlaps (no full sync)", lambda: _judge(main, sc[main]))]
    cases += [Case(name, (lambda name=name: _judge(name, sc[name])), hidden=True)
              for name, s in sc.items() if s["hidden"]]
    return run_check(EXERCISE, TITLE, cases)


def check_run_batch(run_batch: Callable) -> CheckResult:
    """Check a student's ``run_batch(device, batch, in_flight)`` (exercise 08.1)."""
    if not callable(run_batch):
        raise TypeError(f"run_batch must be a function run_batch(device, batch, in_flight), "
                        f"got {type(run_batch).__name__}")
    run_batch = own_code(run_batch, "run_batch", reference_run_batch, launch_with_barrier)
    return verdict_run_batch(collect_run_batch(run_batch))


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
