"""Exercise 08.1's check: the answer passes, every plausible wrong answer fails with a message that
names the exercise, the verdict is computed from plain data, and it never varies."""

from __future__ import annotations

import json

import pytest

from radixlab.course import ex_overlap as ex


def _solution(device, batch, in_flight):  # the notebook's answer, written out (not radixlab's own)
    if in_flight is not None:
        in_flight.wait_inputs_read()
    layout = device.write_inputs(batch.step, batch.fields)
    return device.launch(batch.step, layout, len(batch.reqs), resolve_future=not batch.is_prefill)


def test_solution_passes():
    r = ex.check_run_batch(_solution)
    assert r.passed and r.score == r.max_score, repr(r)


@pytest.mark.parametrize("wrong, words", [
    (ex.no_barrier, "corrupted"),
    (ex.barrier_after_write, "corrupted"),
    (ex.full_sync, "lost their overlap"),
])
def test_wrong_answers_fail_with_a_useful_message(wrong, words):
    r = ex.check_run_batch(wrong)
    assert not r.passed
    assert "08.1" in repr(r) and words in repr(r)


def test_student_edition_blank_is_not_done_and_imported_answer_fails():
    def blank(device, batch, in_flight):
        raise NotImplementedError()
    r = ex.check_run_batch(blank)
    assert r.not_done and "08.1" in repr(r)
    assert not ex.check_run_batch(ex.reference_run_batch).passed


def test_verdict_is_plain_data_and_deterministic():
    a = ex.collect_run_batch(ex.no_barrier)
    b = ex.collect_run_batch(ex.no_barrier)
    assert json.loads(json.dumps(a)) == a == b
    assert repr(ex.verdict_run_batch(a)) == repr(ex.verdict_run_batch(b))


def test_bad_argument():
    with pytest.raises(TypeError, match="run_batch"):
        ex.check_run_batch(42)
