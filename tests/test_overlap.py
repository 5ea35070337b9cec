"""Overlap scheduling (issue 9): device backends, the WAR barrier, identical outputs for both loops,
the worker's life cycle. Device-parametrized: the CUDA cases run where CUDA is present."""

from __future__ import annotations

import random
import subprocess
import sys
import time

import pytest
import torch

from radixlab.engine import Engine
from radixlab.engine.backends import make_backend
from radixlab.engine.device_backend import checksum, pack, unpack
from radixlab.engine.synthetic import ToyDecodeModel, run_toy, toy_backend
from radixlab.engine.timeline import Timeline, ideal_overlap_ratio
from radixlab.model import load_model

CUDA = torch.cuda.is_available()
BACKENDS = ["cpu-process", "cpu-thread"] + (["cuda"] if CUDA else [])
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


# -- staging, checksums, timelines --------------------------------------------------------------


def test_pack_roundtrip_and_checksum_sees_any_overwrite():
    image, layout = pack(7, {"a": torch.tensor([1, 2, 3]), "b": torch.tensor([9])})
    assert int(image[0]) == 7 and [n for n, _, _ in layout] == ["step", "a", "b"]
    assert unpack(image, layout)["a"].tolist() == [1, 2, 3]
    other, _ = pack(8, {"a": torch.tensor([1, 2, 3]), "b": torch.tensor([9])})
    assert checksum(image) != checksum(other)  # the step header alone changes it
    swapped = image.clone()
    swapped[1], swapped[2] = image[2], image[1]
    assert checksum(swapped) != checksum(image)  # position-weighted: a permutation is caught
    with pytest.raises(ValueError, match="reserved"):
        pack(1, {"step": torch.tensor([1])})


def test_bad_backend_arguments_name_the_argument():
    with pytest.raises(ValueError, match="backend kind"):
        make_backend("tpu", ToyDecodeModel())
    with pytest.raises(ValueError, match="max_reqs"):
        make_backend("cpu-process", ToyDecodeModel(), max_reqs=0)
    with pytest.raises(ValueError, match="layers"):
        ToyDecodeModel(layers=0)
    with toy_backend("cpu-process", max_reqs=4) as be:
        with pytest.raises(ValueError, match="num_reqs"):
            run_toy("overlap", be, num_reqs=5)
        with pytest.raises(ValueError, match="loop"):
            run_toy("sideways", be)
        with pytest.raises(ValueError, match="staging_capacity"):
            be.write_inputs(0, {"x": torch.zeros(be.staging_capacity + 1, dtype=torch.int64)})
        with pytest.raises(RuntimeError, match="write_inputs"):
            be.launch(3, (), 1, False)
        assert not be.started  # nothing launched: the worker was never started


def test_ideal_ratio_and_idle_fraction_from_records():
    assert ideal_overlap_ratio(3.0, 12.0) == pytest.approx(15 / 12)
    assert ideal_overlap_ratio(6.0, 6.0) == 2.0
    with pytest.raises(ValueError):
        ideal_overlap_ratio(-1, 1)
    tl = Timeline("normal", "test", t0=0.0)
    for i in range(4):  # device busy 1 s out of every 2 s
        r = tl.record(i)
        r.sched, r.dev, r.proc = (2 * i, 2 * i + 0.5), (2 * i + 0.5, 2 * i + 1.5), (2 * i + 1.5, 2 * i + 2)
        r.batch_size = 2
    assert tl.device_idle_fraction(skip_first=0) == pytest.approx(3 / 7)
    assert tl.cpu_time_per_step() == pytest.approx(1.0) and tl.device_time_per_step() == pytest.approx(1.0)
    assert tl.throughput() == pytest.approx(8 / 8)


# -- both loops, every backend --------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
def test_both_loops_give_identical_tokens(kind):
    with toy_backend(kind, layers=4, hidden=64) as be:
        normal = run_toy("normal", be, num_reqs=6, max_new_tokens=12, cpu_ms=0.2)
        overlap = run_toy("overlap", be, num_reqs=6, max_new_tokens=12, cpu_ms=0.2)
    assert normal.outputs == overlap.outputs
    assert all(len(o) == 12 for o in normal.outputs)
    assert len(set(map(tuple, normal.outputs))) > 1  # the requests really differ
    for tl in (normal.timeline, overlap.timeline):
        assert not tl.corrupted_steps()
        for r in tl.steps():
            assert r.sched and r.read and r.dev and r.copy and r.proc and r.consumed_step == r.step
            assert r.read[0] <= r.dev[0] <= r.dev[1] <= r.copy[1]


def test_future_tokens_chain_through_the_device():
    """Decode inputs are never staged: each step's input is the device's own previous sample."""
    with toy_backend("cpu-process", layers=2, hidden=32) as be:
        out = run_toy("overlap", be, num_reqs=2, max_new_tokens=5, cpu_ms=0.0)
    model = ToyDecodeModel(layers=2, hidden=32)
    model.setup(torch.device("cpu"))
    from radixlab.engine.synthetic import ToyScheduler
    firsts = [r.first_token for r in ToyScheduler(be, num_reqs=2, max_new_tokens=5).reqs]
    for first, got in zip(firsts, out.outputs):
        token, want = first, []
        for pos in range(5):
            token = int(model.forward({"input_ids": torch.tensor([token]), "positions": torch.tensor([pos])})[0])
            want.append(token)
        assert got == want


# -- the WAR hazard -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["cpu-process"] + (["cuda"] if CUDA else []))
def test_adversarial_device_corrupts_deterministically_without_barrier(kind):
    runs = []
    for _ in range(2):
        with toy_backend(kind, layers=2, hidden=32, adversarial=True) as be:
            run_toy("normal", be, num_reqs=4, max_new_tokens=8, cpu_ms=0.0)  # a run before must not matter
            unsafe = run_toy("overlap", be, num_reqs=4, max_new_tokens=8, cpu_ms=0.0, war_barrier=False)
            safe = run_toy("overlap", be, num_reqs=4, max_new_tokens=8, cpu_ms=0.0, war_barrier=True)
            normal = run_toy("normal", be, num_reqs=4, max_new_tokens=8, cpu_ms=0.0, war_barrier=False)
        runs.append((unsafe.timeline.corrupted_steps(), unsafe.outputs))
        # every step but the last read its successor's inputs
        assert unsafe.timeline.corrupted_steps() == list(range(7))
        assert [r.consumed_step for r in unsafe.timeline.steps()][:7] == list(range(1, 8))
        assert unsafe.outputs != normal.outputs
        assert safe.timeline.corrupted_steps() == [] and safe.outputs == normal.outputs
        assert normal.timeline.corrupted_steps() == []  # the normal loop never writes early
    assert runs[0] == runs[1]  # the same corruption every run


def test_adversarial_device_reports_overlap_exactly():
    with toy_backend("cpu-process", layers=2, hidden=32, adversarial=True) as be:
        o = run_toy("overlap", be, num_reqs=2, max_new_tokens=6, cpu_ms=0.0)
        n = run_toy("normal", be, num_reqs=2, max_new_tokens=6, cpu_ms=0.0)
    assert [r.overlapped for r in o.timeline.steps()] == [True] * 5 + [False]
    assert [r.overlapped for r in n.timeline.steps()] == [False] * 6


def test_three_barriers_on_one_adversarial_device():
    """None corrupts, a full wait (``war_barrier="full"``) is safe but never overlaps, the read barrier is
    safe and overlaps; every launch records its write before its read."""
    with toy_backend("cpu-process", layers=2, hidden=32, adversarial=True, device_ms=1.0) as be:
        ref = run_toy("normal", be, num_reqs=3, max_new_tokens=5, cpu_ms=0.5)
        runs = {b: run_toy("overlap", be, num_reqs=3, max_new_tokens=5, cpu_ms=0.5, war_barrier=b)
                for b in (False, "full", True)}
    assert runs[False].timeline.corrupted_steps() == [0, 1, 2, 3]
    for b in ("full", True):
        assert runs[b].timeline.corrupted_steps() == [] and runs[b].outputs == ref.outputs
    assert [r.overlapped for r in runs["full"].timeline.steps()] == [False] * 5
    assert [r.overlapped for r in runs[True].timeline.steps()] == [True] * 4 + [False]
    for run in runs.values():
        for r in run.timeline.steps():
            assert r.write is not None and r.write <= r.launch <= r.read[0]
            assert r.dev[1] - r.dev[0] >= 0.9e-3  # device_ms: the forward lasts at least that long
            assert r.copy[1] - r.copy[0] < 0.5e-3  # the adversarial hold is idle time, not a copy
    for wrong in ("sometimes", "Full", "read", 1, 0, None):
        with pytest.raises(ValueError, match="war_barrier"):
            run_toy("overlap", be, war_barrier=wrong)
    with pytest.raises(TypeError, match="device_ms"):
        ToyDecodeModel(device_ms="2")
    with pytest.raises(ValueError, match="device_ms"):
        ToyDecodeModel(device_ms=-1)


@pytest.mark.parametrize("kind", BACKENDS)
def test_barrier_gives_zero_corruptions_over_a_long_randomized_run(kind):
    rng = random.Random(0)
    with toy_backend(kind, layers=2, hidden=32) as be:
        for trial in range(6):
            kw = dict(num_reqs=rng.randint(1, 12), max_new_tokens=rng.randint(1, 25),
                      cpu_ms=rng.choice([0.0, 0.05, 0.3]), seed=trial)
            a = run_toy("overlap", be, **kw)
            b = run_toy("normal", be, **kw)
            assert a.timeline.corrupted_steps() == [] and a.outputs == b.outputs


# -- the worker's life cycle -----------------------------------------------------------------------


def test_worker_is_lazy_and_stopped_by_shutdown():
    be = toy_backend("cpu-process", layers=1, hidden=16)
    assert not be.started
    run_toy("normal", be, num_reqs=1, max_new_tokens=2, cpu_ms=0.0)
    worker = be._worker
    assert worker.daemon and worker.is_alive()
    be.shutdown()
    worker.join(2)
    assert not worker.is_alive()
    with pytest.raises(RuntimeError, match="shut down"):
        be.write_inputs(0, {"x": torch.tensor([1])})


def test_context_manager_and_garbage_collection_stop_the_worker():
    with toy_backend("cpu-process", layers=1, hidden=16) as be:
        run_toy("normal", be, num_reqs=1, max_new_tokens=2, cpu_ms=0.0)
        worker = be._worker
    worker.join(2)
    assert not worker.is_alive()
    be = toy_backend("cpu-process", layers=1, hidden=16)
    run_toy("normal", be, num_reqs=1, max_new_tokens=2, cpu_ms=0.0)
    worker = be._worker
    del be
    import gc
    gc.collect()
    worker.join(2)
    assert not worker.is_alive()


def test_an_open_engine_never_delays_interpreter_exit():
    code = ("from radixlab.engine import Engine; from radixlab.model import load_model\n"
            "e = Engine(load_model('tiny', device='cpu'), disable_overlap_schedule=False)\n"
            "print(e.generate('hello', {'max_new_tokens': 3})['meta_info']['completion_tokens'])\n")
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3"
    assert time.perf_counter() - t < 60


# -- the engine ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", device="cpu")


def _workload(vocab: int, seed: int = 0) -> tuple[list[list[int]], list[dict]]:
    rng = random.Random(seed)
    system = [rng.randrange(vocab) for _ in range(24)]
    prompts = [system + [rng.randrange(vocab) for _ in range(rng.randint(1, 12))] for _ in range(8)]
    params = [{"max_new_tokens": rng.randint(1, 14)} for _ in prompts]
    return prompts, params


@pytest.mark.parametrize("kwargs", [dict(page_size=1), dict(page_size=4, chunked_prefill_size=8),
                                    dict(page_size=4, max_total_tokens=160, max_running_requests=3)])
def test_engine_loops_give_identical_greedy_outputs(tiny, kwargs):
    prompts, params = _workload(tiny.config.vocab_size)
    outs = {}
    for name, extra in {"in-process normal": {}, "backend normal": dict(device_backend="cpu-process"),
                        "overlap": dict(disable_overlap_schedule=False)}.items():
        with Engine(tiny, **kwargs, **extra) as e:
            outs[name] = [o["output_ids"] for o in e.generate(prompts, params)]
            assert e.req_to_token_pool.available_size() == e.req_to_token_pool.size
            assert e.tree_cache.protected_size() == 0
    assert outs["overlap"] == outs["in-process normal"] == outs["backend normal"]
    assert [len(o) for o in outs["overlap"]] == [p["max_new_tokens"] for p in params]


def test_engine_eos_under_overlap_runs_one_more_step_and_leaks_nothing(tiny):
    base = Engine(tiny).generate("stop here", {"max_new_tokens": 8})["output_ids"]
    tiny.config.eos_token_id = base[2]
    try:
        e = Engine(tiny, page_size=1, disable_overlap_schedule=False)
        out = e.generate(["stop here", "and keep going"], {"max_new_tokens": 8})
        assert out[0]["output_ids"] == base[:3] and out[0]["meta_info"]["finish_reason"] == "stop"
        # the step launched after the EOS was sampled ran: its token is dropped, its KV committed; nothing leaked
        tree_slots = sum(len(n.value) for n in e.tree_cache.nodes())
        assert e.token_to_kv_pool_allocator.available_size() + tree_slots == e.max_total_tokens
        e.shutdown()
    finally:
        tiny.config.eos_token_id = None


def test_engine_overlap_records_a_timeline(tiny):
    with Engine(tiny, disable_overlap_schedule=False) as e:
        e.generate(["a", "b", "c"], {"max_new_tokens": 6})
        tl = e.scheduler.timeline
    assert tl.loop == "overlap" and tl.backend == "cpu-process"
    kinds = [r.kind for r in tl.steps()]
    assert kinds[0] == "extend" and set(kinds[1:]) == {"decode"}
    assert not tl.corrupted_steps()


def test_engine_rejects_bad_overlap_arguments(tiny):
    with pytest.raises(ValueError, match="disable_overlap_schedule"):
        Engine(tiny, disable_overlap_schedule="no")
    with pytest.raises(ValueError, match="backend kind"):
        Engine(tiny, device_backend="tpu")
    with pytest.raises(ValueError, match="cuda"):
        Engine(tiny, device_backend="cuda")


@needs_cuda
def test_cuda_engine_overlap_matches_normal():
    model = load_model("tiny", device="cuda")
    prompts, params = _workload(model.config.vocab_size)
    with Engine(model) as a, Engine(model, disable_overlap_schedule=False) as b:
        assert b.device_backend.kind == "cuda"
        assert [o["output_ids"] for o in a.generate(prompts, params)] == \
            [o["output_ids"] for o in b.generate(prompts, params)]


def test_viz_timeline_draws_and_steps():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from radixlab.viz.timeline import (device_gaps, draw_pipeline, draw_timelines, plot_ratio_curve, step_frames,
                                      timeline_events)

    with toy_backend("cpu-process", layers=1, hidden=16) as be:
        a = run_toy("normal", be, num_reqs=2, max_new_tokens=4, cpu_ms=0.5).timeline
        b = run_toy("overlap", be, num_reqs=2, max_new_tokens=4, cpu_ms=0.5).timeline
    fig = draw_timelines([a, b], labels=["A", "B"])
    assert len(fig.axes) == 2 and fig.axes[0].get_title(loc="left").startswith("A: normal loop")
    plt.close(fig)
    with pytest.raises(ValueError, match="labels"):
        draw_timelines([a], labels=["x", "y"])
    ev = timeline_events(b)
    assert [t for t, _ in ev] == sorted(t for t, _ in ev)
    assert sum("launches batch" in w for _, w in ev) == 4
    frames = step_frames(b, max_events=5)
    assert len(frames) == 5 and frames[-1].count("\n") == 5 and "▶" in frames[-1]
    assert all(g[0] < g[1] for g in device_gaps(a))
    fig = draw_timelines([a, b], marks=True)
    assert len(fig.legends[0].legend_handles) == 9  # the write/read marks join the legend
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert texts.count("0") == 2 and texts.count("3") == 2  # each batch on its CPU bar and its device bar
    plt.close(fig)
    fig = draw_pipeline(b)
    title = fig.axes[0].get_title(loc="left")
    assert title.startswith("while the device runs batch 1, the CPU schedules batch 2")
    labels = {"batch 1: forward", "batch 2: forward", "schedule batch 2", "barrier: until 1 is read",
              "barrier: until 2 is read", "results of 0", "results of 1", "results of 2"}
    assert {t.get_text() for t in fig.axes[0].texts} - {""} <= labels  # a label too wide for its bar is left to the legend
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [
        "schedule + launch", "process results", "barrier: wait for the read", "forward"]
    plt.close(fig)
    with pytest.raises(ValueError, match="step"):
        draw_pipeline(b, step=3)
    fig = plot_ratio_curve([{"proportion": 1.0, "ratio": 1.5}, {"proportion": 2.0, "ratio": 1.3}])
    assert not fig.axes[0].patches  # no shaded band away from the ideal's peak (device = CPU)
    plt.close(fig)


def test_bench_overlap_quick_runs_and_reports(tmp_path, capsys):
    from radixlab.benchmarks.overlap import main

    out = tmp_path / "b.json"
    assert main(["--quick", "--skip-engine", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "device ≈ 1.5–2× CPU" in text and "ToyDecodeModel(layers=" in text and "cpu-thread" in text
    import json
    data = json.loads(out.read_text())
    assert {"ratio", "ideal", "idle_normal", "idle_overlap"} <= set(data["curve"][0])
    with pytest.raises(SystemExit):
        main(["--steps", "0"])


def test_engine_without_barrier_on_the_adversarial_device_fails_loudly(tiny):
    """The engine's inputs are indices: read from the next batch they make no valid batch, and the
    device says why. With the barrier, the same adversarial device gives the normal loop's tokens."""
    from radixlab.engine.device_program import attach_backend

    prompts = ["The radix tree shares", "Overlap hides", "A barrier orders"]
    with Engine(tiny) as ref_engine:
        ref = [o["output_ids"] for o in ref_engine.generate(prompts, {"max_new_tokens": 6})]
    for barrier in (False, True):
        e = Engine(tiny)
        e.device_backend = attach_backend(e, "cpu-process", war_barrier=barrier, adversarial=True)
        e.disable_overlap_schedule = False
        if barrier:
            assert [o["output_ids"] for o in e.generate(prompts, {"max_new_tokens": 6})] == ref
            assert e.scheduler.timeline.corrupted_steps() == []
        else:
            with pytest.raises(RuntimeError, match=r"batch 0 read batch 1's inputs \(a WAR hazard"):
                e.generate(prompts, {"max_new_tokens": 6})
            assert e.req_to_token_pool.available_size() == e.req_to_token_pool.size  # nothing left taken
        e.shutdown()


def test_the_loop_refuses_a_war_barrier_it_would_misread():
    """'Full' or 1 are truthy: unchecked, the loop would silently apply the read barrier."""
    from radixlab.engine.event_loop import EventLoopMixin

    loop = EventLoopMixin()
    for ok in (True, False, "full"):
        loop.war_barrier = ok
        assert loop.war_barrier is ok or loop.war_barrier == ok
    for wrong in ("Full", "read", 1, None):
        with pytest.raises(ValueError, match="war_barrier"):
            loop.war_barrier = wrong
    assert loop.war_barrier == "full"  # unchanged by the refused values
