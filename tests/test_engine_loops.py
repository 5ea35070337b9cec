"""Issue 18 §1, §4, §6: one pair of event loops for the engine and the toy scheduler, one launch type,
the EOS step as SGLang v0.5.17 commits it, ServerArgs, and the engine package's shape."""

from __future__ import annotations

import ast
import inspect
import pathlib

import pytest

from radixlab.engine import Engine, Scheduler, ServerArgs
from radixlab.engine.backends import InProcessBackend
from radixlab.engine.device_backend import Launch
from radixlab.engine.event_loop import EventLoopMixin
from radixlab.engine.studies import dense_greedy
from radixlab.engine.synthetic import ToyScheduler, run_toy, toy_backend
from radixlab.model import load_model
from radixlab import RadixKey

from engine_helpers import assert_no_leak

ENGINE_DIR = pathlib.Path(__file__).resolve().parents[1] / "radixlab" / "engine"


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", device="cpu")


def test_the_engine_and_the_toy_run_the_same_two_loops(tiny):
    for name in ("event_loop_normal", "event_loop_overlap", "_apply_war_barrier"):
        assert getattr(Scheduler, name) is getattr(ToyScheduler, name) is getattr(EventLoopMixin, name)
    src = inspect.getsource(Scheduler.event_loop_overlap)
    assert "_apply_war_barrier(launch)" in src and "result_queue" in src
    # the WAR barrier is applied in one place: the overlap loop, right after the launch
    calls = [p.name for p in ENGINE_DIR.glob("*.py") if "wait_inputs_read()" in p.read_text()]
    assert calls == ["event_loop.py"]


def test_run_batch_returns_a_launch_on_every_backend(tiny):
    with Engine(tiny) as e:
        assert isinstance(e.scheduler.backend, InProcessBackend) and e.device_backend is None
        e.add_requests(["hello there"], {"max_new_tokens": 2})
        batch = e.scheduler.get_next_batch_to_run()
        launch = e.scheduler.run_batch(batch)
        assert isinstance(launch, Launch) and launch.done  # the forward ran in this process
        e.scheduler.process_batch_result(batch, launch)
        while e.step() is not None:
            pass
        assert_no_leak(e)
    with toy_backend("in-process", layers=1, hidden=16) as be:  # the toy on the in-process backend too
        a, b = run_toy("normal", be, num_reqs=2, max_new_tokens=3), run_toy("overlap", be, num_reqs=2, max_new_tokens=3)
        assert a.outputs == b.outputs and not b.timeline.corrupted_steps()


@pytest.mark.parametrize("page_size", [1, 4])
def test_eos_step_launched_under_overlap_is_committed_kv_as_in_sglang(tiny, page_size):
    """SGLang v0.5.17 raises kv_committed_len with kv_allocated_len at allocation: the step launched
    after a request stopped on EOS writes the EOS token's KV, which the tree then caches (or frees as
    the tail). The normal loop never computes that KV."""
    prompt = list(range(3, 14))
    base = Engine(tiny).generate(prompt, {"max_new_tokens": 8})["output_ids"]
    tiny.config.eos_token_id = base[2]
    try:
        for overlap in (False, True):
            with Engine(tiny, page_size=page_size, disable_overlap_schedule=not overlap) as e:
                out = e.generate(prompt, {"max_new_tokens": 8})["output_ids"]
                assert out == base[:3]
                full = prompt + out
                cached = len(e.tree_cache.match_prefix(RadixKey(full)))
                committed = len(full) if overlap else len(full) - 1
                assert cached == committed // page_size * page_size
                assert_no_leak(e)
                # the committed slot holds the right KV: a continuation reuses it and matches dense decoding
                more = e.generate(full + [5], {"max_new_tokens": 3, "ignore_eos": True})
                assert more["output_ids"] == dense_greedy(tiny, full + [5], 3)
                assert more["meta_info"]["cached_tokens"] == cached
    finally:
        tiny.config.eos_token_id = None


def test_server_args_are_validated_once_and_engine_keeps_its_keywords(tiny):
    args = ServerArgs(page_size=4, max_total_tokens=130)
    assert args.max_total_tokens == 128
    for bad, word in (({"page_size": 0}, "page_size"), ({"page_size": 1.5}, "page_size"),
                      ({"random_seed": 2**63}, "random_seed"), ({"disable_overlap_schedule": 1}, "disable_overlap"),
                      ({"schedule_policy": "sjf"}, "schedule_policy"), ({"prefix_cache": "hash", "page_size": 3}, "hash")):
        with pytest.raises(ValueError, match=word):
            ServerArgs(**bad)
    e = Engine(tiny, page_size=4, max_total_tokens=130, schedule_policy="lpm")
    assert e.server_args == ServerArgs(page_size=4, max_total_tokens=130, schedule_policy="lpm")
    assert e.max_total_tokens == 128 and e.scheduler.policy.policy == "lpm"


def _engine_imports() -> dict[str, set[str]]:
    graph = {}
    for p in ENGINE_DIR.glob("*.py"):
        tree = ast.parse(p.read_text())
        type_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                     and getattr(node.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(node)}
        graph[p.stem] = {node.module.split(".")[0] for node in ast.walk(tree)
                         if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
                         and id(node) not in type_only}
    return graph


def test_engine_package_has_no_import_cycle_and_no_module_over_400_lines():
    graph = _engine_imports()

    def reach(start: str, node: str, seen: set) -> bool:
        for d in graph.get(node, ()):
            if d == start or (d not in seen and (seen.add(d) or reach(start, d, seen))):
                return True
        return False

    assert [m for m in graph if reach(m, m, set())] == []
    for p in ENGINE_DIR.glob("*.py"):
        assert len(p.read_text().splitlines()) <= 400, p.name
        text = p.read_text()
        for code in ("engine8", "step13", "adv05"):
            assert code not in text, (p.name, code)


def test_both_loops_raise_the_one_stall_error():
    from radixlab.engine.event_loop import SchedulerStalled

    class Stuck(ToyScheduler):
        def get_next_batch_to_run(self):
            return None  # work is left, but nothing is ever scheduled

    with toy_backend("in-process", layers=1, hidden=16) as be:
        for loop in ("event_loop_normal", "event_loop_overlap"):
            with pytest.raises(SchedulerStalled, match="scheduler stalled"):
                getattr(Stuck(be, num_reqs=1, max_new_tokens=2), loop)()
