"""Exercise 08.1's check: the answer passes, every plausible wrong answer fails with a message that
names the exercise, the evidence is plain data, and the verdict never varies."""

from __future__ import annotations

import json

import pytest

from radixlab.course import ex_overlap as ex
from radixlab.course.exercises import all_specs


def _solution(device, batch, in_flight):  # the notebook's answer, written out (not radixlab's own)
    if in_flight is not None:
        in_flight.wait_inputs_read()
    layout = device.write_inputs(batch.step, batch.fields)
    return device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)


def test_registered_for_the_grader():
    assert all_specs()["08.1"].check == "check_run_batch"


def test_solution_passes():
    r = ex.check_run_batch(_solution, record=False)
    assert r.passed and r.score == r.max_score, repr(r)


@pytest.mark.parametrize("wrong, words", [
    (ex.no_barrier, "corrupted"),
    (ex.barrier_after_write, "corrupted"),
    (ex.full_sync, "lost their overlap"),
    (ex.barrier_for_decode_only, "a prefill too"),
    (ex.barrier_after_launch, "*before* device.write_inputs"),
    (ex.synchronizes, "lost their overlap"),
    (ex.always_resolve_future, "resolve_future"),
])
def test_wrong_answers_fail_with_a_useful_message(wrong, words):
    """Seven plausible wrong orders or waits, each failed with a message naming its mistake."""
    def copy(device, batch, in_flight):  # a student's own copy of the wrong answer
        return wrong(device, batch, in_flight)
    r = ex.check_run_batch(copy, record=False)
    assert not r.passed
    assert "08.1" in repr(r) and words in repr(r)


def test_student_edition_blank_is_not_done_and_imported_answer_fails():
    def run_batch(device, batch, in_flight):
        raise NotImplementedError()
    r = ex.check_run_batch(run_batch, record=False)
    assert r.not_done and "08.1" in repr(r)
    assert not ex.check_run_batch(ex.reference_run_batch, record=False).passed


def test_evidence_is_plain_data_and_deterministic():
    args = ex.cases(0)[0].args
    a, b = ex.drive(ex.no_barrier, args), ex.drive(ex.no_barrier, args)
    assert json.loads(json.dumps(a)) == a == b
    assert a["corrupted"] == list(range(a["steps"] - 1))
    assert ex.compare(a, ex.drive(ex.reference_run_batch, args), args).count("corrupted") == 1


def test_bad_argument():
    with pytest.raises(TypeError, match="run_batch"):
        ex.check_run_batch(42)


@pytest.mark.parametrize("seed", [0, 12345])
def test_every_case_needs_the_barrier(seed):
    """No case gives points to an answer without a barrier (the blank with only its raise deleted), and a
    barrier that skips prefill batches loses the second-wave case (a prefill launched over a decode in flight)."""
    from radixlab.course.spec import check_exercise

    def no_barrier(device, batch, in_flight):
        layout = device.write_inputs(batch.step, batch.fields)
        return device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)

    def decode_only(device, batch, in_flight):
        return ex.barrier_for_decode_only(device, batch, in_flight)

    r = check_exercise(ex.SPEC, no_barrier, seed=seed, record=False)
    assert r.score == 0 and not any(o.passed for o in r.outcomes), repr(r)
    r = check_exercise(ex.SPEC, decode_only, seed=seed, record=False)
    failed = [o.name for o in r.outcomes if not o.passed]
    assert len(failed) == 1 and "second wave" in failed[0], repr(r)


def test_rewriting_the_launch_records_does_not_buy_the_overlap():
    """A full sync that then marks the launch as overlapped scored 3/3: the evidence of overlap was the
    launch record, which run_batch holds. Now it is drive's own log of what run_batch waited for."""
    def forged(device, batch, in_flight):
        if in_flight is not None:
            in_flight.result()
            in_flight.record.overlapped = True
        layout = device.write_inputs(batch.step, batch.fields)
        return device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)

    def synchronizes(device, batch, in_flight):
        device.synchronize()
        layout = device.write_inputs(batch.step, batch.fields)
        return device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)

    def syncs_behind_the_log(device, batch, in_flight):  # the real backend, reached through the launch
        if in_flight is not None:
            in_flight.backend.synchronize()
        layout = device.write_inputs(batch.step, batch.fields)
        return device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)

    def through_the_target(device, batch, in_flight):  # a view kept its target in a plain attribute once
        device.synchronize()
        layout = device.write_inputs(batch.step, batch.fields)
        launch = device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)
        launch._target.record.overlapped = True
        return launch

    r = ex.check_run_batch(synchronizes, record=False)
    assert r.score == 0 and "lost their overlap" in repr(r), repr(r)
    for fn, name in ((forged, "record"), (syncs_behind_the_log, "backend"), (through_the_target, "_target")):  # only the exercise's methods pass
        r = ex.check_run_batch(fn, record=False)
        assert r.score == 0 and f"not {name!r}" in repr(r), repr(r)
