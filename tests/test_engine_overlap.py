"""engine8's engine tests, run again with the overlap event loop (issue 9 §1): every test of
``test_engine.py`` and ``test_engine_proofs.py`` with ``Engine(disable_overlap_schedule=False)`` as the
default, so batches run on a device backend (the CPU worker process here, CUDA streams on a GPU)."""

from __future__ import annotations

import pytest

from radixlab.engine import Engine

from test_engine import *  # noqa: F401,F403  (collected again here, under the overlap loop)
from test_engine_proofs import *  # noqa: F401,F403


@pytest.fixture(autouse=True)
def overlap_by_default(monkeypatch):
    defaults = dict(Engine.__init__.__kwdefaults__)
    defaults["disable_overlap_schedule"] = False
    monkeypatch.setattr(Engine.__init__, "__kwdefaults__", defaults)
    yield


def test_error_mid_run_leaves_nothing_taken(tiny, monkeypatch):
    """Overlap variant of engine8's test: the failure happens on the device (in the worker), the
    error reaches ``generate``, nothing stays taken, and the next call starts a fresh worker."""
    from radixlab.engine.device_program import EngineProgram

    calls = {"n": 0}
    real = EngineProgram.forward

    def flaky(self, inputs):
        calls["n"] += 1  # counted in the worker process (or in this one, on CUDA)
        if calls["n"] == 3:
            raise RuntimeError("device lost")
        return real(self, inputs)
    monkeypatch.setattr(EngineProgram, "forward", flaky)
    e = Engine(tiny, page_size=4)
    e.generate("a shared system prompt", {"max_new_tokens": 2})
    with pytest.raises(RuntimeError, match="device lost"):
        e.generate(["a shared system prompt, then a question", "another"], {"max_new_tokens": 5})
    assert_no_leak(e)  # noqa: F405
    monkeypatch.setattr(EngineProgram, "forward", real)
    assert e.generate("again", {"max_new_tokens": 2})["meta_info"]["completion_tokens"] == 2
    e.shutdown()


def test_sharing_a_half_filled_page_corrupts_the_other_request(tiny):
    """Overlap variant: B is admitted while A's prefill result is still in the queue, so the tree has
    not adopted A's prompt yet (``cache_unfinished_req`` runs when a result is *processed*, one step
    later under overlap, as in SGLang) and B finds nothing to share. The tokens stay exact."""
    from test_engine_proofs import _half_page_run

    a, b, out_a, out_b = _half_page_run(tiny, unsafe=False)
    assert out_b["meta_info"]["cached_tokens"] == 0  # one step of lag: A's prompt is not in the tree yet
    check_against_dense(tiny, a, out_a)  # noqa: F405
    check_against_dense(tiny, b, out_b)  # noqa: F405
