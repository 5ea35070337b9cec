"""Exercise 08.1 in the grader: the honest order scores 3, the blank and the wrong orders or waits do not."""

from __future__ import annotations

import pytest

from grade_helpers import grade_cells
from radixlab.course import sandbox as sb

boxed = pytest.mark.skipif(not sb.sandboxed(), reason=f"no bubblewrap here: {sb.sandbox_works()}")

WAIT = "    if in_flight is not None:\n        in_flight.{}()\n"
WRITE = "    layout = device.write_inputs(batch.step, batch.fields)\n"
LAUNCH = "device.launch(batch.step, layout, len(batch.reqs), resolve_future={})\n"
HEAD = "def run_batch(device, batch, in_flight):\n"

CASES = {
    "08.1 honest": (HEAD + WAIT.format("wait_inputs_read") + WRITE + "    return " + LAUNCH.format("not batch.is_prefill"), 3),
    "08.1 honest, waiting on the new launch": (  # the loop's own placement: as correct
        HEAD + WRITE + "    launch = " + LAUNCH.format("not batch.is_prefill") + "    launch.wait_inputs_read()\n"
        "    return launch\n", 3),
    "08.1 blank": (HEAD + "    raise NotImplementedError()\n", 0),
    "08.1 no barrier": (HEAD + WRITE + "    return " + LAUNCH.format("not batch.is_prefill"), 0),
    "08.1 wait after the write": (HEAD + WRITE + WAIT.format("wait_inputs_read") + "    return "
                                  + LAUNCH.format("not batch.is_prefill"), 0),
    "08.1 full wait": (HEAD + WAIT.format("result") + WRITE + "    return " + LAUNCH.format("not batch.is_prefill"), 0),
    "08.1 future ids for a prefill too": (HEAD + WAIT.format("wait_inputs_read") + WRITE + "    return "
                                          + LAUNCH.format("True"), 0),
}


@boxed
@pytest.mark.parametrize("name", sorted(CASES))
def test_grader_scores(name):
    source, score = CASES[name]
    result, run = grade_cells("08.1", [source])
    if score == 3:
        assert result is not None and result.passed and result.score == 3, (repr(result), run.errors)
    else:
        assert result is None or result.score == 0, repr(result)
