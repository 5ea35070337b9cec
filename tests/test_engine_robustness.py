"""The engine under attack: a dead, interrupted or hung device worker; sampling values at the edge;
seeded sampling across chunk sizes and cache states; adapters loaded or replaced late; odd inputs."""

from __future__ import annotations

import math
import os
import signal
import time

import pytest
import torch

from radixlab.engine import Engine
from radixlab.engine.device_backend import WorkerDiedError, WorkerTimeoutError
from radixlab.model import load_model

from engine_helpers import assert_no_leak, check_against_dense, one_thread

_one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="patches the worker's program before a fork")


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", device="cpu")


PROMPTS = [list(range(30, 70)), list(range(30, 50)) + [7, 8, 9]]
SP = {"max_new_tokens": 6}


class Fault:
    """Wraps the worker's ``program.forward`` (set before the worker forks): at call ``n`` the worker
    sends itself ``sig``, or sleeps (a hang) when ``sig`` is None."""

    def __init__(self, real, n: int, sig: int | None) -> None:
        self.real, self.n, self.sig, self.calls = real, n, sig, 0

    def __call__(self, inputs):
        self.calls += 1
        if self.calls == self.n:
            if self.sig is None:
                time.sleep(3600)
            os.kill(os.getpid(), self.sig)
        return self.real(inputs)


def _overlap_engine(model, **kwargs) -> Engine:
    return Engine(model, disable_overlap_schedule=False, device_backend="cpu-process", **kwargs)


# -- the worker process ------------------------------------------------------------------------------


@needs_fork
@pytest.mark.parametrize("when", ["idle", "in flight"])
def test_a_killed_worker_raises_a_clear_error_and_the_next_generate_restarts_it(tiny, when):
    ref = Engine(tiny).generate(PROMPTS, SP)
    e = _overlap_engine(tiny)
    program = e.device_backend.program
    if when == "in flight":
        program.forward = Fault(program.forward, 3, signal.SIGKILL)
    else:
        assert [o["output_ids"] for o in e.generate(PROMPTS, SP)] == [o["output_ids"] for o in ref]
        worker = e.device_backend._worker
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(5.0)
    with pytest.raises(WorkerDiedError, match="device worker died.*SIGKILL.*fresh worker"):
        e.generate(PROMPTS, SP)
    assert_no_leak(e)
    program.__dict__.pop("forward", None)  # the next worker is forked without the fault
    for _ in range(2):
        assert [o["output_ids"] for o in e.generate(PROMPTS, SP)] == [o["output_ids"] for o in ref]
    assert_no_leak(e)
    e.shutdown()


@needs_fork
def test_the_worker_ignores_the_interrupt_that_the_notebook_sends_to_its_process_group(tiny):
    """JupyterLab's "Interrupt kernel" and Ctrl-C signal the whole group: the worker must live on."""
    ref = Engine(tiny).generate(PROMPTS, SP)
    e = _overlap_engine(tiny)
    program = e.device_backend.program
    program.forward = Fault(program.forward, 2, signal.SIGINT)
    assert [o["output_ids"] for o in e.generate(PROMPTS, SP)] == [o["output_ids"] for o in ref]
    worker = e.device_backend._worker
    os.kill(worker.pid, signal.SIGINT)  # idle this time
    assert [o["output_ids"] for o in e.generate(PROMPTS, SP)] == [o["output_ids"] for o in ref]
    assert e.device_backend._worker is worker and worker.is_alive()
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the host's mask is back
    e.shutdown()


INTERRUPTED_SCRIPT = """
import signal, sys
from radixlab.engine import Engine
from radixlab.model import load_model
e = Engine(load_model("tiny", device="cpu"), disable_overlap_schedule=False)
ref = e.generate([1, 2, 3], {"max_new_tokens": 4})["output_ids"]
print("ready", flush=True)
try:
    while True:
        e.generate(list(range(60)), {"max_new_tokens": 60})
except KeyboardInterrupt:
    pass
pool = e.req_to_token_pool
print("after", e.generate([1, 2, 3], {"max_new_tokens": 4})["output_ids"] == ref,
      pool.available_size() == pool.size, flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")
def test_interrupting_the_whole_process_group_mid_generate_leaves_a_working_engine():
    """What Ctrl-C and JupyterLab's "Interrupt kernel" do: SIGINT to every process of the group."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED_SCRIPT], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # inside the generate loop
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert out.strip() == "after True True", err[-2000:]


ORPHAN_SCRIPT = """
import os, signal
from radixlab.engine import Engine
from radixlab.model import load_model
e = Engine(load_model("tiny", device="cpu"), disable_overlap_schedule=False)
e.generate([1, 2, 3], {"max_new_tokens": 2})
print(e.device_backend._worker.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no atexit, no finalizer: a kernel killed outright
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.split()[:2] == ["State:", "Z"] for line in f)  # a zombie has exited
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not os.path.isdir("/proc") or not hasattr(os, "fork"), reason="reads /proc")
def test_the_worker_exits_when_its_host_is_killed_outright():
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-c", ORPHAN_SCRIPT], stdout=subprocess.PIPE, text=True, env=env)
    pid = int(proc.stdout.readline())
    proc.wait(60)
    for _ in range(300):  # it exits as soon as it reads the end of file; poll, never time it
        if _gone(pid):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the worker outlived its host")


@needs_fork
def test_a_hung_worker_times_out_with_a_clear_error(tiny):
    ref = Engine(tiny).generate(PROMPTS, SP)
    e = _overlap_engine(tiny)
    e.device_backend.watchdog_timeout = 1.0
    program = e.device_backend.program
    program.forward = Fault(program.forward, 2, None)
    with pytest.raises(WorkerTimeoutError, match="watchdog_timeout=1.0"):
        e.generate(PROMPTS, SP)
    assert_no_leak(e)
    program.__dict__.pop("forward")
    e.device_backend.watchdog_timeout = 300.0  # a loaded machine may be slow: only the hang is under test
    assert [o["output_ids"] for o in e.generate(PROMPTS, SP)] == [o["output_ids"] for o in ref]
    e.shutdown()


def test_watchdog_timeout_is_checked(tiny):
    from radixlab.engine.cpu_worker import CPUProcessBackend
    for bad in (0, -1.0, "5", True):
        with pytest.raises(ValueError, match="watchdog_timeout"):
            CPUProcessBackend(object(), max_reqs=2, watchdog_timeout=bad)


# -- sampling values --------------------------------------------------------------------------------


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("params, word", [
    ({"temperature": math.nan}, "temperature must be a finite number"),
    ({"temperature": math.inf}, "temperature must be a finite number"),
    ({"temperature": 10 ** 400}, "temperature must be a finite number"),
    ({"sampling_seed": 2 ** 64}, "sampling_seed must be <= 9223372036854775807"),
    ({"sampling_seed": 2 ** 63}, "sampling_seed"),
    ({"top_k": 2 ** 63}, "top_k must be <= "),
    ({"top_p": math.nan}, "top_p"),
    ({"stop_token_ids": [1, -5]}, r"stop_token_ids\[1\] must be >= 0"),
])
def test_bad_sampling_values_are_rejected_before_anything_runs(tiny, params, word, overlap):
    e = Engine(tiny, disable_overlap_schedule=not overlap)
    with pytest.raises(ValueError, match="prompt 1: " + word):
        e.generate(["fine", "bad"], [{"max_new_tokens": 2}, {"max_new_tokens": 2, **params}])
    assert e.stats.extend_batches == 0
    assert e.generate("fine", {"max_new_tokens": 2})["meta_info"]["completion_tokens"] == 2
    e.shutdown()


@pytest.mark.parametrize("overlap", [False, True])
def test_edge_sampling_values_that_are_valid_run(tiny, overlap):
    e = Engine(tiny, disable_overlap_schedule=not overlap)
    greedy = e.generate("edge", {"max_new_tokens": 5})["output_ids"]
    tiny_t = e.generate("edge", {"max_new_tokens": 5, "temperature": 1e-40, "sampling_seed": 3})
    assert tiny_t["output_ids"] == greedy  # SGLang: below 1e-6 is greedy
    big = {"max_new_tokens": 5, "temperature": 1.0, "sampling_seed": 2 ** 63 - 1, "top_k": 2 ** 63 - 1}
    assert len(e.generate("edge", big)["output_ids"]) == 5
    e.shutdown()


@pytest.mark.parametrize("overlap", [False, True])
def test_random_seed_must_fit_int64_and_default_seeds_wrap(tiny, overlap):
    with pytest.raises(ValueError, match="random_seed must be <="):
        Engine(tiny, random_seed=2 ** 63)
    e = Engine(tiny, random_seed=2 ** 63 - 1, disable_overlap_schedule=not overlap)
    out = e.generate(["a", "b"], {"max_new_tokens": 4, "temperature": 1.0})
    assert [len(o["output_ids"]) for o in out] == [4, 4]
    e.shutdown()


# -- seeded sampling does not depend on chunking or caching ------------------------------------------


@pytest.mark.parametrize("overlap", [False, True])
def test_a_seeded_request_gives_the_same_tokens_whatever_the_chunks_and_the_cache(tiny, overlap):
    prompt = list(range(100, 140))
    sp = {"max_new_tokens": 10, "temperature": 1.0, "sampling_seed": 1234}
    outs = {}
    for chunk in (None, 8, 16):
        for cached in (0, 24):
            e = Engine(tiny, chunked_prefill_size=chunk, disable_overlap_schedule=not overlap)
            if cached:
                e.generate(prompt[:cached], {"max_new_tokens": 0})
            out = e.generate(prompt, sp)
            assert out["meta_info"]["cached_tokens"] == cached
            outs[chunk, cached] = out["output_ids"]
            e.shutdown()
    assert len(set(map(tuple, outs.values()))) == 1, outs


# -- the request counter ------------------------------------------------------------------------------


def test_a_rejected_generate_does_not_advance_the_request_counter(tiny):
    sp = {"max_new_tokens": 8, "temperature": 1.0}
    fresh = Engine(tiny).generate("seeded by the counter", sp)
    e = Engine(tiny)
    with pytest.raises(ValueError, match="prompt 2 is empty"):
        e.generate(["a", "b", ""], {"max_new_tokens": 1})
    out = e.generate("seeded by the counter", sp)
    assert out["meta_info"]["id"] == fresh["meta_info"]["id"] == "req-1"
    assert out["output_ids"] == fresh["output_ids"]


# -- adapters -------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlap", [False, True])
def test_a_replaced_adapter_gets_its_own_namespace(overlap):
    model = load_model("tiny", device="cpu")
    model.add_adapter("A", seed=1, scale=2.0)
    e = Engine(model, keep_logits=True, disable_overlap_schedule=not overlap)
    prompt = list(range(60, 90))
    check_against_dense(model, prompt, e.generate(prompt, SP, lora_path="A"), lora_path="A")
    model.remove_adapter("A")
    model.add_adapter("A", seed=2, scale=2.0)  # same name, other weights
    again = e.generate(prompt, SP, lora_path="A")
    assert again["meta_info"]["cached_tokens"] == 0  # the old adapter's KV is not reused
    check_against_dense(model, prompt, again, lora_path="A")
    assert e.generate(prompt, SP, lora_path="A")["meta_info"]["cached_tokens"] == len(prompt) - 1
    assert {n.key.extra_key for n in e.tree_cache.nodes()} == {("", "A"), ("", ("A", 2))}
    assert_no_leak(e)
    e.shutdown()


def test_remove_adapter_names_the_unknown_adapter():
    model = load_model("tiny", device="cpu")
    with pytest.raises(ValueError, match="no adapter named 'Z'"):
        model.remove_adapter("Z")


@pytest.mark.parametrize("kind", ["cpu-process", "cpu-thread"])
def test_an_adapter_added_after_the_engine_works_on_a_device_backend(kind):
    model = load_model("tiny", device="cpu")
    model.add_adapter("A", seed=1, scale=2.0)
    e = Engine(model, keep_logits=True, disable_overlap_schedule=False, device_backend=kind)
    prompt = list(range(10, 40))
    e.generate(prompt, SP, lora_path="A")  # the worker starts with adapter A only
    model.add_adapter("C", seed=3, scale=2.0)
    check_against_dense(model, prompt, e.generate(prompt, SP, lora_path="C"), lora_path="C")
    check_against_dense(model, prompt, e.generate(prompt, SP, lora_path="A"), lora_path="A")
    assert_no_leak(e)
    e.shutdown()


def test_an_adapter_changed_while_requests_run_on_a_device_backend_is_rejected_clearly():
    model = load_model("tiny", device="cpu")
    e = Engine(model, disable_overlap_schedule=False)
    reqs = e.add_requests([[1, 2, 3]], SP)
    model.add_adapter("late", seed=4)
    with pytest.raises(ValueError, match="prompt 0: adapter 'late' changed while requests run"):
        e.add_requests([[4, 5, 6]], SP, lora_path="late")
    while e.step() is not None:
        pass
    assert e.result(reqs[0])["meta_info"]["completion_tokens"] == 6
    assert e.generate([4, 5, 6], SP, lora_path="late")["meta_info"]["completion_tokens"] == 6
    e.shutdown()


# -- odd inputs and life cycle -------------------------------------------------------------------------


def test_a_1d_tensor_prompt_is_one_prompt(tiny):
    e = Engine(tiny)
    as_list = e.generate([5, 6, 7, 8], SP)
    assert e.generate(torch.tensor([5, 6, 7, 8]), SP)["output_ids"] == as_list["output_ids"]
    two = e.generate(torch.tensor([[5, 6, 7, 8], [5, 6, 7, 8]]), SP)
    assert [o["output_ids"] for o in two] == [as_list["output_ids"]] * 2
    with pytest.raises(ValueError, match="integer tensor"):
        e.generate(torch.tensor([1.0, 2.0]), SP)


@pytest.mark.parametrize("params, error, word", [
    ({"stop_token_ids": "12"}, TypeError, "stop_token_ids must be a list of token ids"),
    ({"stop_token_ids": [1.5]}, TypeError, r"stop_token_ids\[0\] must be an int"),
    ({"ignore_eos": "false"}, TypeError, "ignore_eos must be a bool"),
    ({"ignore_eos": 1}, TypeError, "ignore_eos must be a bool"),
    ({"sampling_seed": 1.0}, TypeError, "sampling_seed must be an int"),
    ({"temperature": "1"}, TypeError, "temperature must be a number"),
])
def test_sampling_params_of_the_wrong_type_are_rejected(tiny, params, error, word):
    with pytest.raises(error, match="prompt 0: " + word):
        Engine(tiny).generate("x", {"max_new_tokens": 1, **params})


def test_stop_token_ids_accept_a_list_set_or_tensor(tiny):
    e = Engine(tiny)
    first = e.generate("stop here", {"max_new_tokens": 4})["output_ids"][0]
    for stop in ([first], {first}, (first,), torch.tensor([first])):
        out = e.generate("stop here", {"max_new_tokens": 4, "stop_token_ids": stop})
        assert out["output_ids"] == [first] and out["meta_info"]["finish_reason"] == "stop"


def test_result_of_an_aborted_request_is_its_partial_output(tiny, monkeypatch):
    e = Engine(tiny)
    req, = e.add_requests(["abort me"], {"max_new_tokens": 8})
    e.step()
    e.step()
    monkeypatch.setattr(e.model_runner, "forward", lambda batch: (_ for _ in ()).throw(RuntimeError("device lost")))
    with pytest.raises(RuntimeError, match="device lost"):
        e.step()
    out = e.result(req)
    assert out["meta_info"]["finish_reason"] == "abort" and out["meta_info"]["e2e_latency"] is None
    assert out["meta_info"]["completion_tokens"] == len(out["output_ids"]) == 2
    with pytest.raises(TypeError, match="req must be a Req"):
        e.result("req-1")


def test_step_after_shutdown_is_a_clear_error(tiny):
    e = Engine(tiny)
    e.add_requests(["x"], SP)
    e.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        e.step()


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_worker_of_either_start_method_survives_sigint_and_restarts_after_sigkill(start_method):
    import multiprocessing as mp
    from radixlab.engine.cpu_worker import CPUProcessBackend
    from radixlab.engine.synthetic import ToyDecodeModel
    if start_method not in mp.get_all_start_methods():
        pytest.skip(f"no {start_method} here")
    backend = CPUProcessBackend(ToyDecodeModel(layers=1, hidden=16), max_reqs=4, start_method=start_method)
    fields = {"req_pool_indices": torch.tensor([0, 1]), "input_ids": torch.tensor([3, 4]),
              "positions": torch.tensor([0, 0])}

    def run(step: int) -> list[int]:
        layout = backend.write_inputs(step, fields)
        return backend.launch(step, layout, 2, resolve_future=False).result().tolist()

    want = run(0)
    os.kill(backend._worker.pid, signal.SIGINT)
    assert run(1) == want
    worker = backend._worker
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(10.0)
    with pytest.raises(WorkerDiedError, match="SIGKILL"):
        run(2)
    assert run(3) == want and backend._worker is not worker
    backend.shutdown()


def test_an_interrupt_while_a_result_is_handled_loses_no_message(monkeypatch):
    """KeyboardInterrupt between receiving a message and recording it: the next wait handles it."""
    from radixlab.engine.cpu_worker import CPUProcessBackend
    from radixlab.engine.synthetic import ToyDecodeModel
    backend = CPUProcessBackend(ToyDecodeModel(layers=1, hidden=16), max_reqs=2)
    layout = backend.write_inputs(0, {"req_pool_indices": torch.tensor([0]), "input_ids": torch.tensor([3]),
                                      "positions": torch.tensor([0])})
    launch = backend.launch(0, layout, 1, resolve_future=False)
    real, calls = backend._finish, []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real(*args)
    monkeypatch.setattr(backend, "_finish", interrupted)
    with pytest.raises(KeyboardInterrupt):
        launch.result()
    assert len(launch.result()) == 1 and len(calls) == 2
    backend.shutdown()
